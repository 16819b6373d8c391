"""Shop on orch/WebShop-v0 with a hand-written policy that reads only the observation.

The policy searches the instruction's words, opens the first result within the price
bound, clicks the option values the instruction names, and buys. It prints one
episode step by step, then compares its mean score and success rate on 50 test goals
with the privileged ``GoalShopper`` (which knows the target product).

    python examples/webshop_scripted.py
"""

from __future__ import annotations

import re

from tqdm.auto import tqdm

from orchenv.envs.webshop import WebShopEnv
from orchenv.envs.webshop.baselines import GoalShopper, instruction_query

PRICE = re.compile(r"price lower than ([\d.]+) dollars")
OPTIONS = re.compile(r" with ((?:[a-z ]+: [^,]+(?:, and )?)+?)(?:, and price|$)")


class InstructionShopper:
    """Acts on the instruction and page text only (no privileged information)."""

    def __init__(self) -> None:
        self.opened = False

    def act(self, obs: str, info: dict) -> str:
        instruction = info["instruction"]
        clickables = info["available_actions"]["clickables"]
        if info["available_actions"]["has_search_bar"]:
            return f"search[{instruction_query(instruction)}]"
        if info["page"] == "results":
            bound = PRICE.search(instruction)
            limit = float(bound.group(1)) if bound else float("inf")
            # the original's text page: ... [SEP] ASIN [SEP] title [SEP] $price [SEP] ...
            pieces = obs.split(" [SEP] ")
            asins = [p for p in pieces if p.lower() in clickables and p.startswith("B")]
            for i, piece in enumerate(pieces[:-2]):
                price = pieces[i + 2].split(" to ")[0]
                if piece in asins and price.startswith("$") and float(price[1:]) <= limit:
                    return f"click[{piece.lower()}]"
            # "Next >" is always offered; an empty page means the hits ran out
            return "click[next >]" if asins else "click[back to search]"
        if info["page"] == "item":
            wanted = OPTIONS.search(instruction)
            pairs = wanted.group(1).split(", and ") if wanted else []
            for pair in pairs:
                value = pair.split(": ", 1)[-1].strip()
                if value in clickables and value not in info["chosen_options"].values():
                    return f"click[{value}]"
            return "click[buy now]"
        return "click[< prev]"


def episode(env: WebShopEnv, index: int, shopper_cls, verbose: bool = False) -> float:
    obs, info = env.reset(options={"task_index": index})
    shopper = GoalShopper(env.goal) if shopper_cls is GoalShopper else shopper_cls()
    if verbose:
        print("Instruction:", info["instruction"])
    done = False
    while not done:
        action = shopper.act(obs, info)
        obs, reward, term, trunc, info = env.step(action)
        done = term or trunc
        if verbose:
            print(f"  {action:<60} -> {info['page']}, reward {reward:.3f}")
    if verbose:
        print("Bought:", info["final_answer"])
        print("Reward parts:", info.get("reward_parts", "(no purchase)"))
    return info["score"]


def main() -> None:
    # gym.make("orch/WebShop-v0", split="test") builds the same env once the id is registered
    env = WebShopEnv(split="test")
    episode(env, 0, InstructionShopper, verbose=True)
    for cls in (InstructionShopper, GoalShopper):
        scores = [episode(env, i, cls) for i in tqdm(range(50), desc=cls.__name__, leave=False)]
        success = sum(s >= 1.0 - 1e-9 for s in scores) / len(scores)
        print(
            f"{cls.__name__:<20} mean score {sum(scores) / len(scores):.3f}  success {success:.0%}"
        )


if __name__ == "__main__":
    main()
