"""``orchenv view RUN_DIR``: a static, self-contained HTML viewer of a run's episodes.

An ``orchenv eval`` run directory logs each episode's actions, reward, cost and agent calls
(``episodes.jsonl``), not its turns. The viewer rebuilds the turns by replaying the logged
actions on the env, reset with the episode's seed, when that costs nothing and repeats
exactly: every agent of the pool on the ``simulated`` backend. Each turn then shows the
observation the controller saw, its action, the agents' replies, the step's reward and
cost; a replay whose task or return differs from the log is marked as diverged. Runs on
other backends (live, replayed) show the logged actions only: nothing is called again.

The page (``RUN_DIR/view.html`` by default) has no external resource: the data is embedded
as JSON (every ``<``, ``>`` and ``&`` escaped, lone surrogates replaced, long texts cut at
``MAX_TEXT_CHARS``) and rendered with ``textContent`` only, so hostile text cannot run.
Filters: outcome, agent called, reward range. ``compare=OTHER_RUN_DIR`` pairs the two runs'
episodes by (seed, episode), which are the same tasks for runs of the same env and split.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from orchenv.error import ConfigError, DataError, OrchEnvError

__all__ = ["MAX_TEXT_CHARS", "build_view", "load_run", "render_html", "replay_turns", "safe_text"]

logger = logging.getLogger(__name__)

#: the longest text kept for one field (an observation, an action, a reply); the rest is cut
MAX_TEXT_CHARS = 20_000
#: the most episodes one page shows (the first ones, by seed and episode)
DEFAULT_MAX_EPISODES = 2000
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def safe_text(value: Any, limit: int = MAX_TEXT_CHARS) -> str:
    """``value`` as text for the page: lone surrogates replaced with U+FFFD, cut at
    ``limit`` characters (saying how many were cut)."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        text = f"{text[:limit]}\n[... {len(text) - limit:,} more characters cut]"
    return _SURROGATE.sub("\ufffd", text)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def load_run(run_dir: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``run.json`` and the rows of ``episodes.jsonl`` of an ``orchenv eval`` directory."""
    from orchenv.eval.rundir import EPISODES_FILE, RUN_FILE, read_episode_log, read_json_file

    path = Path(run_dir)
    if not (path / EPISODES_FILE).is_file():
        raise ConfigError(
            f"{str(path)!r} is not an `orchenv eval` run directory: no {EPISODES_FILE} "
            "(expected the --out folder of `orchenv eval`)"
        )
    info: dict[str, Any] = {}
    if (path / RUN_FILE).is_file():
        info = read_json_file(path / RUN_FILE)
    rows = [row for row in read_episode_log(path / EPISODES_FILE) if isinstance(row, dict)]
    return info, rows


def _replayable(info: Mapping[str, Any]) -> tuple[Any, str]:
    """The env to replay the run on, or ``(None, why not)``."""
    import gymnasium as gym

    from orchenv.discrete import orch_base

    env_id = info.get("env_id")
    if not isinstance(env_id, str):
        return None, "run.json names no env"
    kwargs = dict(info.get("env_kwargs") or {})
    if kwargs.get("backend") not in (None, "simulated"):
        return None, f"the run's agents are on the {kwargs['backend']!r} backend"
    if isinstance(info.get("pool"), str):
        kwargs.setdefault("pool", info["pool"])
    if isinstance(info.get("split"), str):
        kwargs.setdefault("split", info["split"])
    try:
        env = gym.make(env_id, **kwargs)
        base = orch_base(env)
        env.reset(seed=0)
        pool = base.pool
    except (gym.error.Error, TypeError, OrchEnvError) as exc:
        return None, f"cannot make {env_id!r} here ({exc}); pass --import for an outside env"
    backends = {getattr(a, "backend", None) for a in getattr(pool, "agents", ())} if pool else set()
    if backends - {"simulated"}:
        env.close()
        return None, f"the pool's agents are on {sorted(map(str, backends))} (not re-called)"
    return env, ""


def replay_turns(env: Any, row: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Replay one logged episode on ``env``: its turns, and ``""`` or why it diverged."""
    from orchenv.discrete import orch_base

    base = orch_base(env)
    obs, info = env.reset(seed=int(row.get("episode_seed", 0)))
    turns: list[dict[str, Any]] = []
    total = 0.0
    note = ""
    if row.get("task_id") is not None and info.get("task_id", row["task_id"]) != row["task_id"]:
        note = f"replayed task {info.get('task_id')!r}, logged {row['task_id']!r}"
    for action in row.get("actions") or []:
        seen = len(base.transcript)
        observation = obs
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        replies = [
            {"agent": safe_text(e.get("role")), "text": safe_text(e.get("text", ""))}
            for e in base.transcript[seen:]
            if e.get("role") != "controller"
        ]
        calls = [
            {
                "agent": safe_text(c.get("agent")),
                "tokens": int(c.get("prompt_tokens", 0)) + int(c.get("completion_tokens", 0)),
                "cost_usd": float(c.get("cost_usd", 0.0)),
            }
            for c in info.get("calls") or []
        ]
        turns.append(
            {
                "observation": safe_text(observation),
                "action": safe_text(action),
                "reward": float(reward),
                "cost_usd": float(info.get("cost_usd", 0.0)),
                "invalid": bool(info.get("invalid_action")),
                "error": safe_text(info.get("parse_error") or ""),
                "calls": calls,
                "replies": replies,
            }
        )
        if terminated or truncated:
            break
    logged = _number(row.get("reward"))
    if not note and logged is not None and abs(total - logged) > 1e-6:
        note = f"replayed return {total:.4f}, logged {logged:.4f}"
    return turns, note


def _episode(row: Mapping[str, Any]) -> dict[str, Any]:
    calls = row.get("agent_calls")
    agents: dict[Any, Any] = calls if isinstance(calls, dict) else {}
    return {
        "seed": int(row.get("seed", 0)),
        "episode": int(row.get("episode", 0)),
        "task": safe_text(row.get("task_id", ""), 500),
        "correct": row.get("correct") if isinstance(row.get("correct"), bool) else None,
        "reward": _number(row.get("reward")),
        "cost_usd": _number(row.get("cost_usd")),
        "turns": int(row.get("turns", 0) or 0),
        "agents": {safe_text(k, 200): _number(v) for k, v in agents.items()},
        "final_answer": safe_text(row.get("final_answer", ""), 2000),
        "actions": [safe_text(a) for a in (row.get("actions") or [])],
        "turn_log": [],
        "note": "",
    }


def build_view(
    run_dir: str | Path,
    *,
    replay: bool = True,
    max_episodes: int = DEFAULT_MAX_EPISODES,
    progress: bool = True,
) -> dict[str, Any]:
    """The viewer's data for one run: its identity, episodes and (when replayable) turns."""
    info, rows = load_run(run_dir)
    rows = sorted(rows, key=lambda r: (int(r.get("seed", 0)), int(r.get("episode", 0))))
    episodes = [_episode(row) for row in rows[:max_episodes]]
    why = "turns not replayed (--no-replay)"
    env = None
    if replay:
        env, why = _replayable(info)
    if env is not None:
        why = ""
        try:
            bar = tqdm(
                list(zip(rows, episodes, strict=False)),
                desc=f"replaying {Path(run_dir).name}",
                unit="ep",
                disable=not progress,
                leave=False,
            )
            for row, episode in bar:
                try:
                    episode["turn_log"], episode["note"] = replay_turns(env, row)
                except (OrchEnvError, ValueError, TypeError) as exc:
                    episode["note"] = safe_text(f"replay failed: {exc}", 2000)
        finally:
            env.close()
    return {
        "run_dir": safe_text(str(run_dir), 2000),
        "env_id": safe_text(info.get("env_id", rows[0].get("env_id", "") if rows else "")),
        "controller": safe_text(info.get("controller_label", info.get("controller", ""))),
        "pool": safe_text(info.get("pool", "")),
        "split": safe_text(info.get("split", "")),
        "episodes": episodes,
        "episodes_total": len(rows),
        "turns_note": why,
    }


def _embed(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</script>``, no ``<!--``)."""
    text = json.dumps(data, ensure_ascii=True, allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render_html(runs: Sequence[Mapping[str, Any]], title: str = "orchenv run viewer") -> str:
    """The self-contained page for one run, or two paired runs (``runs[1]`` compared)."""
    from html import escape

    return _PAGE.replace("__TITLE__", escape(safe_text(title, 300))).replace(
        "__DATA__", _embed(list(runs))
    )


def write_view(
    run_dir: str | Path,
    *,
    out: str | Path | None = None,
    compare: str | Path | None = None,
    replay: bool = True,
    max_episodes: int = DEFAULT_MAX_EPISODES,
    progress: bool = True,
) -> Path:
    """Build and write the page (default ``RUN_DIR/view.html``); returns its path."""
    runs = [build_view(run_dir, replay=replay, max_episodes=max_episodes, progress=progress)]
    if compare is not None:
        other = build_view(compare, replay=replay, max_episodes=max_episodes, progress=progress)
        if other["env_id"] != runs[0]["env_id"]:
            raise DataError(
                f"--compare needs two runs of the same env: {runs[0]['env_id']!r} and "
                f"{other['env_id']!r}"
            )
        runs.append(other)
    path = Path(out) if out is not None else Path(run_dir) / "view.html"
    title = f"orchenv view: {runs[0]['env_id']}, {runs[0]['controller']}"
    if compare is not None:
        title += f" vs {runs[1]['controller']}"
    path.write_text(render_html(runs, title), encoding="utf-8")
    logger.info("wrote %s", path)
    return path


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<title>__TITLE__</title>
<style>
body{font:14px system-ui,sans-serif;margin:1em 2em;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
tr.ep{cursor:pointer}tr.ep:hover{background:#eef}tr.sel{background:#dde}
.ok{color:#070}.bad{color:#b00}.note{color:#a60}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:6px;margin:2px 0;max-height:24em;overflow:auto}
.turn{border-left:3px solid #99c;padding-left:8px;margin:10px 0}
.cols{display:flex;gap:16px}.cols>div{flex:1;min-width:0}
#filters label{margin-right:1em}
</style></head><body>
<h1 id="title"></h1><p id="meta"></p>
<div id="filters">
<label>outcome <select id="f-outcome"><option value="">all</option><option value="correct">correct</option><option value="wrong">wrong</option></select></label>
<label>agent called <select id="f-agent"><option value="">any</option></select></label>
<label>reward from <input id="f-min" type="number" step="any" size="6"> to <input id="f-max" type="number" step="any" size="6"></label>
<label id="l-diff" hidden><input id="f-diff" type="checkbox"> only pairs whose reward differs</label>
<span id="count"></span></div>
<table id="episodes"><thead><tr id="head"></tr></thead><tbody></tbody></table>
<div id="detail"></div>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const RUNS = JSON.parse(document.getElementById("data").textContent);
const A = RUNS[0], B = RUNS[1] || null;
function el(tag, text, cls){const e=document.createElement(tag);if(text!==undefined&&text!==null)e.textContent=String(text);if(cls)e.className=cls;return e;}
function num(x,d){return x===null||x===undefined?"-":Number(x).toFixed(d);}
function money(x){return x===null||x===undefined?"-":"$"+Number(x).toFixed(6);}
function outcome(ep){return ep.correct===null?"-":(ep.correct?"correct":"wrong");}
document.getElementById("title").textContent = document.title;
document.getElementById("meta").textContent = RUNS.map((r,i)=>(i?"compared with ":"")+r.controller+" on "+r.env_id+" (pool "+r.pool+", split "+r.split+"; "+r.episodes.length+" of "+r.episodes_total+" episodes shown; "+r.run_dir+")"+(r.turns_note?" - "+r.turns_note:"")).join("; ");
const key = ep => ep.seed+":"+ep.episode;
const other = B ? new Map(B.episodes.map(ep=>[key(ep),ep])) : null;
const agents = new Set(); RUNS.forEach(r=>r.episodes.forEach(ep=>Object.keys(ep.agents).forEach(a=>{if(ep.agents[a])agents.add(a);})));
const fa = document.getElementById("f-agent"); [...agents].sort().forEach(a=>{const o=el("option",a);o.value=a;fa.appendChild(o);});
const cols = ["seed","episode","task","outcome","reward","cost","turns","agents called"];
const head = document.getElementById("head");
(B ? ["seed","episode","task",A.controller+": outcome","reward",B.controller+": outcome","reward","difference"] : cols).forEach(c=>head.appendChild(el("th",c)));
if (B) document.getElementById("l-diff").hidden = false;
function keep(ep){
  const o=document.getElementById("f-outcome").value, ag=fa.value;
  const lo=parseFloat(document.getElementById("f-min").value), hi=parseFloat(document.getElementById("f-max").value);
  const eps = B ? [ep, other.get(key(ep))].filter(Boolean) : [ep];
  if (o && !eps.some(e=>outcome(e)===o)) return false;
  if (ag && !eps.some(e=>e.agents[ag])) return false;
  if (!isNaN(lo) && !eps.some(e=>e.reward!==null&&e.reward>=lo)) return false;
  if (!isNaN(hi) && !eps.some(e=>e.reward!==null&&e.reward<=hi)) return false;
  if (B && document.getElementById("f-diff").checked){const b=other.get(key(ep));if(!b||b.reward===ep.reward)return false;}
  return true;
}
function render(){
  const body=document.querySelector("#episodes tbody"); body.replaceChildren();
  let shown=0;
  for (const ep of A.episodes){
    if(!keep(ep)) continue; shown++;
    const tr=el("tr",undefined,"ep"); tr.dataset.key=key(ep);
    const cells = B ? (()=>{const b=other.get(key(ep));return [ep.seed,ep.episode,ep.task,outcome(ep),num(ep.reward,3),b?outcome(b):"(missing)",b?num(b.reward,3):"-",b&&ep.reward!==null&&b.reward!==null?num(b.reward-ep.reward,3):"-"];})()
      : [ep.seed,ep.episode,ep.task,outcome(ep),num(ep.reward,3),money(ep.cost_usd),ep.turns,Object.keys(ep.agents).filter(a=>ep.agents[a]).map(a=>a+" x"+ep.agents[a]).join(", ")];
    cells.forEach((c,i)=>{const td=el("td",c);if(c==="correct")td.className="ok";if(c==="wrong")td.className="bad";tr.appendChild(td);});
    tr.addEventListener("click",()=>{document.querySelectorAll("tr.sel").forEach(t=>t.classList.remove("sel"));tr.classList.add("sel");show(ep);});
    body.appendChild(tr);
  }
  document.getElementById("count").textContent = shown+" episodes";
}
function episodeView(run, ep){
  const d=el("div"); d.className="episode";
  d.appendChild(el("h3", run.controller+": seed "+ep.seed+", episode "+ep.episode+", task "+ep.task));
  d.appendChild(el("p","outcome "+outcome(ep)+", return "+num(ep.reward,3)+", cost "+money(ep.cost_usd)+", final answer: "+ep.final_answer));
  if (ep.note) d.appendChild(el("p","replay diverged: "+ep.note,"note"));
  if (ep.turn_log.length){
    ep.turn_log.forEach((t,i)=>{
      const box=el("div",undefined,"turn"); box.dataset.turn=String(i+1);
      box.appendChild(el("h4","turn "+(i+1)+": reward "+num(t.reward,3)+", cost "+money(t.cost_usd)+(t.invalid?" (unusable action: "+t.error+")":"")));
      box.appendChild(el("b","observation")); box.appendChild(el("pre",t.observation,"obs"));
      box.appendChild(el("b","action")); box.appendChild(el("pre",t.action,"act"));
      t.replies.forEach(r=>{box.appendChild(el("b","reply of "+r.agent));box.appendChild(el("pre",r.text,"reply"));});
      if (t.calls.length) box.appendChild(el("p","calls: "+t.calls.map(c=>c.agent+" ("+c.tokens+" tokens, "+money(c.cost_usd)+")").join("; ")));
      d.appendChild(box);
    });
  } else {
    d.appendChild(el("p",run.turns_note||"no turns","note"));
    ep.actions.forEach((a,i)=>{const box=el("div",undefined,"turn");box.dataset.turn=String(i+1);box.appendChild(el("b","action "+(i+1)));box.appendChild(el("pre",a,"act"));d.appendChild(box);});
  }
  return d;
}
function show(ep){
  const det=document.getElementById("detail"); det.replaceChildren();
  if (!B){det.appendChild(episodeView(A,ep));return;}
  const cols=el("div",undefined,"cols"); const b=other.get(key(ep));
  const l=el("div"); l.appendChild(episodeView(A,ep)); cols.appendChild(l);
  const r=el("div"); if(b) r.appendChild(episodeView(B,b)); else r.appendChild(el("p","no episode with this seed in the other run")); cols.appendChild(r);
  det.appendChild(cols);
}
["f-outcome","f-agent","f-min","f-max","f-diff"].forEach(id=>{const e=document.getElementById(id);e.addEventListener("input",render);e.addEventListener("change",render);});
render();
const first=document.querySelector("tr.ep"); if(first) first.click();
</script></body></html>
"""
