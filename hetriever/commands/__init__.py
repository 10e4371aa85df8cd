"""The `hetriever` subcommands, one module per group; `hetriever.cli` wires them into one
parser."""
