"""The original WebShop text env's observations: ``observation_mode="text"`` and ``"text_rich"``.

princeton-nlp/WebShop renders each page with its HTML templates and converts the HTML
to text (``WebAgentTextEnv.convert_html_to_text``): every visible text node of the page,
in document order, is one piece. ``text`` strips each piece and joins them with
`` [SEP] ``; ``text_rich`` writes one piece a line, buttons as ``[button] X
[button_]``, option values indented by two spaces (``[clicked button] X [clicked
button_]`` for a chosen one, which also puts ``You have clicked X.`` lines on top) and
product ASINs on a line of their own after a blank one (``[clicked button]`` for those
opened since the last ``back to search``).

No HTML is produced here: each page lists its text nodes directly, in the templates'
order, with the spaces around them that the templates put inside the tags (the rich
mode keeps them; the plain one strips them). A value that renders to nothing gives no
node, as in the original. Written by hand for orchenv because the original renders
through Flask, Jinja and BeautifulSoup, which a gym env should not need; the golden
tests in ``tests/test_webshop_text.py`` pin the strings.
"""

from __future__ import annotations

import json

from orchenv.envs.webshop.products import Product
from orchenv.envs.webshop.site import (
    ATTRIBUTES_PAGE,
    DONE,
    ITEM,
    RESULTS,
    SEARCH,
    SUB_PAGE,
    Site,
    SiteState,
)

#: the kinds of text node the rich mode marks: plain text, a button, an option label,
#: a product link
TEXT, BUTTON, LABEL, LINK = "text", "button", "label", "link"

Node = tuple[str, str]

SEP = " [SEP] "


def _instruction(instruction: str, *, search_page: bool) -> list[Node]:
    # the search page's template writes "Instruction: <br>", the others "Instruction:<br>"
    return [(TEXT, "Instruction: " if search_page else "Instruction:"), (TEXT, instruction)]


def _nav(prev: bool = True) -> list[Node]:
    nodes: list[Node] = [(BUTTON, "Back to Search")]
    if prev:
        nodes.append((BUTTON, "< Prev"))
    return nodes


def _product_nodes(p: Product) -> list[Node]:
    return [(LINK, p.asin), (TEXT, p.title), (TEXT, p.price_tag)]


def page_nodes(site: Site, state: SiteState, instruction: str, reward: float | None) -> list[Node]:
    """The visible text nodes of the page ``state`` is on, in the original's order."""
    if state.page == SEARCH:
        return [
            (TEXT, "WebShop"),
            *_instruction(instruction, search_page=True),
            (BUTTON, "Search"),
        ]
    if state.page == RESULTS:
        total = len(state.hits)
        nodes = [*_instruction(instruction, search_page=False), *_nav(prev=False)]
        nodes.append((TEXT, f"Page {state.results_page} (Total results: {total})"))
        if state.results_page > 1:
            nodes.append((BUTTON, "< Prev"))
        nodes.append((BUTTON, "Next >"))
        for i in site.page_hits(state):
            nodes += _product_nodes(site.catalog.product(i))
        return nodes
    assert state.item is not None
    p = site.catalog.product(state.item)
    if state.page == ITEM:
        nodes = [*_instruction(instruction, search_page=False), *_nav()]
        for group, values in p.options:
            nodes.append((TEXT, group))
            nodes += [(LABEL, v) for v in values]
        nodes += [(TEXT, p.title), (TEXT, f"Price: {p.price_tag}"), (TEXT, f"Rating: {p.rating}")]
        nodes += [(BUTTON, page.capitalize()) for page in site.sub_pages]
        nodes.append((BUTTON, "Buy Now"))
        return nodes
    if state.page == SUB_PAGE:
        nodes = [*_instruction(instruction, search_page=False), *_nav()]
        if state.sub_page == "description":
            nodes.append((TEXT, p.description))
        elif state.sub_page == "features":
            nodes += [(TEXT, f" {b}") for b in p.bullet_points]
        elif state.sub_page == "reviews":
            for r in p.reviews:
                nodes += [(TEXT, f'"{r.title}"'), (TEXT, str(r.score)), (TEXT, r.body)]
        elif state.sub_page == ATTRIBUTES_PAGE:
            nodes += [(TEXT, f" {a}") for a in p.attributes]
            nodes += [(TEXT, p.category), (TEXT, p.query), (TEXT, p.product_category)]
        return nodes
    assert state.page == DONE
    return _done_nodes(p, state, reward)


def _done_nodes(p: Product, state: SiteState, reward: float | None) -> list[Node]:
    """The done page as the text env renders it (it passes no goal, code or attributes,
    so those fields print ``None`` or nothing, and the hidden ones are still text)."""
    # Flask's ``tojson``: sorted keys, and <, >, & and ' escaped for HTML
    options = json.dumps(dict(sorted(state.chosen.items())))
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("'", "\\u0027")):
        options = options.replace(char, escaped)
    nodes: list[Node] = [
        (TEXT, "Thank you for shopping with us!"),
        (TEXT, "Your code: "),
        (TEXT, "None"),
        (TEXT, " (Paste it in your MTurk interface.)"),
        (TEXT, "Purchased"),
        (TEXT, "asin"),
        (TEXT, p.asin),
        (TEXT, "options"),
        (TEXT, options),
    ]
    for label in ("attrs", "category", "query", "product category"):
        nodes += [(TEXT, label), (TEXT, "None")]
    nodes.append((TEXT, "Target"))
    for label in ("asin", "options", "attrs", "price upper", "instuction text", "category"):
        nodes.append((TEXT, label))
    nodes += [(TEXT, "product category"), (TEXT, "query"), (TEXT, "Goal "), (TEXT, "None")]
    nodes += [(TEXT, "Reward"), (TEXT, "Your score (min 0.0, max 1.0)"), (TEXT, str(reward))]
    nodes += [(TEXT, "Reward Details "), (TEXT, "None")]
    return nodes


_ASCII_SPACE = " \n\t\x0c\r"


def _as_parsed(text: str) -> str:
    """A node's text as the original's HTML parser hands it over: a value of ASCII
    whitespace only becomes ``"\n"`` when it holds a newline (and is then skipped) and
    ``" "`` otherwise (an empty piece)."""
    if text and not text.strip(_ASCII_SPACE):
        return "\n" if "\n" in text else " "
    return text


def render_text(nodes: list[Node]) -> str:
    """``observation_mode="text"``: the stripped nodes joined by `` [SEP] ``."""
    texts = (_as_parsed(text) for _, text in nodes if text)
    return SEP.join(text.strip() for text in texts if text != "\n")


def render_text_rich(site: Site, state: SiteState, nodes: list[Node]) -> str:
    """``observation_mode="text_rich"``: one node a line, buttons and clicks marked."""
    chosen = _item_url_tail(state) if state.page == ITEM else ""
    opened = {site.catalog.asins[i] for i in state.session_items}
    out = ""
    for kind, raw in nodes:
        text = _as_parsed(raw)
        if not text or text == "\n":
            continue
        if kind == BUTTON:
            piece = f"[button] {text} [button_]"
        elif kind == LABEL:
            if f'"{text}"' in chosen:
                piece = f"  [clicked button] {text} [clicked button_]"
                out = f"You have clicked {text}.\n" + out
            else:
                piece = f"  [button] {text} [button_]"
        elif kind == LINK:
            mark = "clicked button" if text in opened else "button"
            piece = f"\n[{mark}] {text} [{mark}_]"
        else:
            piece = text
        out += piece + "\n"
    return out


def _item_url_tail(state: SiteState) -> str:
    """The part of the original's item-page URL its "clicked" test can match: the
    search words and the chosen options as JSON (``"value"`` in quotes)."""
    return "+".join(state.query.split(" ")) + "/" + json.dumps(state.chosen)
