"""Site builders: each synthetic site is rendered by one of many builders, each the way a different team builds a
website (its own markup and naming, URL scheme, navigation, listings, record pages, forms and interruptions).

The interface (`base.Builder`, see docs/adding-a-site-builder.md):

- `name` (the registry key, `Task.builder`), `summary`, `scheme` (`base.Scheme`: a URL template per page kind
  and the listing's query names; `meaning(site, url)` reads any URL back into a `base.Meaning`, page kind +
  parameters), `words` (word banks for labels, buttons and headings, one variant per site);
- `page` (the document around a body: head, navigation, interruptions, footer) and `render_home`,
  `render_listing`, `render_record`, `render_login`, `render_cart`, `render_checkout` (and optionally
  `render_done`, `render_help`, `render_about`, `render_account`, `render_not_found`), or `shell` for a
  hash-routed builder;
- the oracle's abstract steps as actions on its pages: `dismiss`, `log_in`, `open_record`, `browse`,
  `open_listed`, `submit_record`, `add_to_cart`, `check_out`.

`Builder.route` is shared: the web app hands each synthetic-site request to the site's builder in one call; the
builder's scheme says what the URL means, the shared handler reads or changes the site state (the same for every
builder), the builder renders. The family content (families/) and the site state (state.py) are the same whatever
the builder. A builder is one module here, registered in `REGISTRY` below with its split.

Splits by builder, beside the split by website (webenv.splits.split_of): a site built by a validation builder is
a validation site, one built by a held-out builder a test site (catalog.stricter_split), unless its host is already
further held out. So everything that honours the split (ListTasks --split, the learning loop, the trainer's
refusal of held-out episodes) keeps held-out builders out of training.
"""

from __future__ import annotations

from webenv.sites.builders.base import Builder
from webenv.sites.builders.boardroom import Boardroom
from webenv.sites.builders.classic import Classic
from webenv.sites.builders.dashboard import Dashboard
from webenv.sites.builders.docsite import DocSite
from webenv.sites.builders.facetgrid import FacetGrid
from webenv.sites.builders.forumware import Forumware
from webenv.sites.builders.govform import GovForm
from webenv.sites.builders.hashapp import HashApp
from webenv.sites.builders.ledger import Ledger
from webenv.sites.builders.platform import Platform
from webenv.sites.builders.pressroom import Pressroom
from webenv.sites.builders.storefront import Storefront
from webenv.sites.builders.wikiwiki import WikiWiki
from webenv.v1 import common_pb2 as pb

#: Every builder by name, with the split of its sites (SPLIT_TRAIN, SPLIT_VALIDATION or SPLIT_TEST = held out).
REGISTRY: dict[str, tuple[Builder, int]] = {
    "platform": (Platform(), pb.SPLIT_TRAIN),
    "ledger": (Ledger(), pb.SPLIT_TRAIN),
    "storefront": (Storefront(), pb.SPLIT_TRAIN),
    "forumware": (Forumware(), pb.SPLIT_TRAIN),
    "wikiwiki": (WikiWiki(), pb.SPLIT_TRAIN),
    "boardroom": (Boardroom(), pb.SPLIT_VALIDATION),
    "hashapp": (HashApp(), pb.SPLIT_TEST),
    "pressroom": (Pressroom(), pb.SPLIT_TRAIN),
    "govform": (GovForm(), pb.SPLIT_TEST),
    "facetgrid": (FacetGrid(), pb.SPLIT_TRAIN),
    "classic": (Classic(), pb.SPLIT_TRAIN),
    "dashboard": (Dashboard(), pb.SPLIT_TRAIN),
    "docsite": (DocSite(), pb.SPLIT_VALIDATION),
}


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str) -> Builder:
    """The builder called `name` (KeyError naming the known ones otherwise)."""
    try:
        return REGISTRY[name][0]
    except KeyError:
        raise KeyError(f"unknown builder {name!r}; builders: {', '.join(REGISTRY)}") from None


def splits(chosen: list[str] | tuple[str, ...] = ()) -> dict[str, int]:
    """{builder name: its split} for the chosen builders (every registered one when none is chosen), the argument
    catalog.SiteCatalog takes; an unknown name is a KeyError naming it."""
    return {n: (get(n), REGISTRY[n][1])[1] for n in (chosen or REGISTRY)}


def of_split(split: int) -> list[str]:
    return [n for n, (_, s) in REGISTRY.items() if s == split]
