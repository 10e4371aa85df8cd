"""The `hetriever` subcommands, one module per group; `hetriever.cli` wires them into one
parser."""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
