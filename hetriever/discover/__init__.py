"""The discover stage: which repositories there are (submodules of a parent, or a
folder of repos), their commits and change sets, files read from git objects, and
the site configuration as Hugo reads it.
"""
