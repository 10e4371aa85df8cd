"""The discover stage: which repositories there are (submodules of a parent, or a
folder of repos), their commits and change sets, files read from git objects, and
the site configuration as Hugo reads it.
"""

# Import each name from the module that defines it: a package re-exports nothing.
__all__: list[str] = []
