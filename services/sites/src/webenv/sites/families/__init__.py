"""Site families, one module each; FAMILIES maps a family name to its spec."""

from webenv.sites.families import bank, forum, jobs, mail, recipes, shop, travel, wiki
from webenv.sites.families.base import FamilySpec

FAMILIES: dict[str, FamilySpec] = {
    m.FAMILY.name: m.FAMILY for m in (shop, forum, wiki, travel, jobs, recipes, bank, mail)
}
