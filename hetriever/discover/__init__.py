"""The discover stage: which repositories there are (submodules of a parent, or a
folder of repos), their commits and change sets, files read from git objects, and
the site configuration as Hugo reads it.
"""

from hetriever.core.models import name_site_type
from hetriever.discover.site import Site

# Repository.site's annotation names Site, which the core imports for type checking only:
# named here, as the stage loads, so pydantic (Prefect's flow parameters) resolves it.
name_site_type(Site)
