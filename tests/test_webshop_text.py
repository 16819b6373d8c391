"""Golden observations of ``observation_mode="text"`` / ``"text_rich"`` and the original protocol.

A scripted session on a three-product catalog in the original file format. Every expected
string is written by hand from princeton-nlp/WebShop's templates (``search_page.html``,
``results_page.html``, ``item_page.html``, ``features_page.html``, ``done_page.html``) and
its ``convert_html_to_text``: visible text nodes, stripped, joined by `` [SEP] ``.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("thefuzz")
pytest.importorskip("spacy")

from orchenv.envs.webshop import WebShopEnv  # noqa: E402

PRODUCTS = [
    {
        "asin": "B000000001",
        "name": "Red Cotton Shirt",
        "full_description": "A soft cotton shirt.",
        "small_description": ["Soft cotton", "Machine wash"],
        "pricing": "$12.99",
        "customization_options": {
            "Size": [{"value": "Small"}, {"value": "X-Large"}],
            "Color": [{"value": "Red"}, {"value": "Black/White"}],
        },
        "category": "fashion",
        "query": "shirts",
        "product_category": "Clothing › Men › Shirts",
        "images": ["x"],
    },
    {
        "asin": "B000000002",
        "name": "Blue Linen Shirt",
        "full_description": "A linen shirt.",
        "small_description": "Breathable",
        "pricing": "$10.00 - $15.00",
        "customization_options": {},
        "category": "fashion",
        "query": "shirts",
        "product_category": "Clothing › Men › Shirts",
        "images": ["x"],
    },
    {
        "asin": "B000000003",
        "name": "Coffee Mug",
        "full_description": "A mug.",
        "small_description": ["Ceramic"],
        "pricing": "$8.00",
        "customization_options": None,
        "category": "kitchen",
        "query": "mugs",
        "product_category": "Home › Kitchen",
        "images": ["x"],
    },
]
HUMAN = {
    "B000000001": [
        {
            "instruction": "i need a red cotton shirt in x-large.",
            "instruction_attributes": ["cotton"],
            "instruction_options": ["x-large", "red"],
        }
    ]
}


@pytest.fixture
def data_dir(tmp_path):
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(PRODUCTS))
    attrs = {p["asin"]: {"attributes": ["machine wash"]} for p in PRODUCTS}
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(attrs))
    (tmp_path / "items_human_ins.json").write_text(json.dumps(HUMAN))
    return str(tmp_path)


def _env(data_dir: str, **kwargs) -> WebShopEnv:
    return WebShopEnv(source="files", data_dir=data_dir, num_products=None, split="test", **kwargs)


def test_scripted_session_renders_the_original_strings(data_dir):
    env = _env(data_dir)
    assert env.max_turns == 100
    obs, info = env.reset(seed=0)
    ins = env.goal.instruction
    assert ins.startswith("i need a red cotton shirt in x-large, and price lower than ")
    head = f"Instruction: [SEP] {ins} [SEP] Back to Search"
    assert obs == f"WebShop [SEP] Instruction: [SEP] {ins} [SEP] Search"
    assert info["available_actions"] == {"has_search_bar": True, "clickables": ["search"]}

    results = (
        f"{head} [SEP] Page 1 (Total results: 2) [SEP] Next > [SEP] B000000001 [SEP] "
        "Red Cotton Shirt [SEP] $12.99 [SEP] B000000002 [SEP] Blue Linen Shirt [SEP] "
        "$10.0 to $15.0"
    )
    obs, _, _, _, info = env.step("search[cotton shirt]")
    assert obs == results
    assert info["available_actions"]["clickables"] == [
        "back to search",
        "next >",
        "b000000001",
        "b000000002",
    ]
    # "Next >" is always there; past the last hit the page is empty
    obs, _, _, _, info = env.step("click[next >]")
    assert obs == f"{head} [SEP] Page 2 (Total results: 2) [SEP] < Prev [SEP] Next >"
    assert info["available_actions"]["clickables"] == ["back to search", "< prev", "next >"]
    obs, _, _, _, _ = env.step("click[< prev]")
    assert obs == results

    item = (
        f"{head} [SEP] < Prev [SEP] size [SEP] small [SEP] x-large [SEP] color [SEP] red "
        "[SEP] black | white [SEP] Red Cotton Shirt [SEP] Price: $12.99 [SEP] Rating: N.A. "
        "[SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
    obs, _, _, _, info = env.step("click[b000000001]")
    assert obs == item
    assert info["available_actions"]["clickables"] == [
        "back to search",
        "< prev",
        "description",
        "features",
        "reviews",
        "buy now",
        "small",
        "x-large",
        "red",
        "black | white",
    ]
    obs, _, _, _, info = env.step("click[x-large]")
    assert obs == item and info["chosen_options"] == {"size": "x-large"}
    obs, _, _, _, _ = env.step("click[features]")
    assert obs == f"{head} [SEP] < Prev [SEP] Soft cotton [SEP] Machine wash"
    obs, _, _, _, _ = env.step("click[< prev]")
    assert obs == item
    # an unusable action leaves the page as it was, with no notice added
    obs, _, _, _, info = env.step("click[next >]")
    assert info["invalid_action"] and obs == item
    # search works from an item page, as in the original
    obs, _, _, _, _ = env.step("search[mug]")
    assert (
        obs
        == f"{head} [SEP] Page 1 (Total results: 1) [SEP] Next > [SEP] B000000003 [SEP] Coffee Mug [SEP] $8.0"
    )
    env.step("click[b000000003]")
    obs, reward, terminated, _, info = env.step("click[buy now]")
    assert terminated
    assert obs == (
        "Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] (Paste it in your "
        "MTurk interface.) [SEP] Purchased [SEP] asin [SEP] B000000003 [SEP] options [SEP] {} "
        "[SEP] attrs [SEP] None [SEP] category [SEP] None [SEP] query [SEP] None [SEP] product "
        "category [SEP] None [SEP] Target [SEP] asin [SEP] options [SEP] attrs [SEP] price upper "
        "[SEP] instuction text [SEP] category [SEP] product category [SEP] query [SEP] Goal [SEP] "
        f"None [SEP] Reward [SEP] Your score (min 0.0, max 1.0) [SEP] {reward} [SEP] Reward "
        "Details [SEP] None"
    )


def test_text_rich_marks_buttons_and_clicks(data_dir):
    env = _env(data_dir, observation_mode="text_rich")
    obs, _ = env.reset(seed=0)
    ins = env.goal.instruction
    assert obs == f"WebShop\nInstruction: \n{ins}\n[button] Search [button_]\n"
    env.step("search[cotton shirt]")
    env.step("click[b000000001]")
    env.step("click[< prev]")
    obs, _, _, _, _ = env.step("click[next >]")
    obs, _, _, _, _ = env.step("click[< prev]")
    assert obs == (
        f"Instruction:\n{ins}\n[button] Back to Search [button_]\nPage 1 (Total results: 2)\n"
        "[button] Next > [button_]\n\n[clicked button] B000000001 [clicked button_]\n"
        "Red Cotton Shirt\n$12.99\n\n[button] B000000002 [button_]\nBlue Linen Shirt\n"
        "$10.0 to $15.0\n"
    )
    env.step("click[b000000001]")
    env.step("click[black | white]")
    obs, _, _, _, _ = env.step("click[x-large]")
    assert obs == (
        "You have clicked black | white.\nYou have clicked x-large.\n"
        f"Instruction:\n{ins}\n[button] Back to Search [button_]\n[button] < Prev [button_]\n"
        "size\n  [button] small [button_]\n  [clicked button] x-large [clicked button_]\n"
        "color\n  [button] red [button_]\n  [clicked button] black | white [clicked button_]\n"
        "Red Cotton Shirt\nPrice: $12.99\nRating: N.A.\n[button] Description [button_]\n"
        "[button] Features [button_]\n[button] Reviews [button_]\n[button] Buy Now [button_]\n"
    )
    # "back to search" forgets which products were opened
    env.step("click[back to search]")
    obs, _, _, _, _ = env.step("search[cotton shirt]")
    assert "[clicked button]" not in obs


def test_chat_mode_and_strict_protocol_are_named_variants(data_dir):
    env = _env(data_dir, observation_mode="chat", protocol="orchenv")
    obs, info = env.reset(seed=0)
    assert "Available actions:" in obs and info["available_actions"]["clickables"] == []
    env.step("search[cotton shirt]")
    _, _, _, _, info = env.step("click[b000000001]")
    _, _, _, _, info = env.step("search[mug]")
    assert info["invalid_action"] and "search bar" in info["parse_error"]
