"""Refereed play: ``orchenv serve --referee BOARD.json --key KEYFILE --runs DIR`` makes the
server the board's referee (docs/board-referee.md).

A client opens a *submission* with the first reset of a ``/ws`` session,
``reset(submission="NAME")``; from then on the server, not the client, decides what is
played:

* the tasks are the board's sealed plan (``orchenv.eval.board.sealed_plan``: seeds and the
  simulated backends' seed are HMACs of the maintainer's key), each exactly once per
  submission, in the plan's order (which the key decides: it is not public). Each later
  ``reset()`` (no arguments) starts the next task; a reset that names a seed, split, index,
  task id, options, a fork handle or a seat is refused, and so is a reset while the current
  episode is unfinished;
* nothing is forked or snapshotted (a referee is always ``--sealed``) and the task API is off;
* task ids on the wire (``info["task_id"]``, ``state.task_id``) are opaque: an HMAC of the
  real id under the key, the same for every submission;
* the record is written server-side as each episode ends, in the run folder shape ``orchenv
  leaderboard`` reads (``run.json``, ``episodes.jsonl``, ``summary.json``), and signed with
  the board's key in ``sealed.json`` (the HMAC scheme of ``orchenv board play``), so
  ``orchenv leaderboard --board BOARD --key KEYFILE`` ranks it among the sealed runs;
* every sealed task counts. When the session ends before the plan does (the client closed,
  vanished, or idled past ``--idle-timeout``), the submission is closed as *abandoned*: the
  unfinished episode counts as played with its return so far (its rewards up to the last
  step; not correct, score 0) and every task not started counts with return 0 (not correct,
  score 0). Both carry the metric ``referee_abandoned = 1``. ``run.json``'s ``refereed``
  block says which it was (``complete`` / ``abandoned``).

Admission is by *ticket*: the maintainer issues one per submitter and name
(``Referee.ticket``; ``python -m orchenv.serve.referee ticket --board B --key K NAME``), an
HMAC of the name under the board's key, and the client opens its submission with
``reset(submission="NAME", ticket="...")``. A submission name is used once per runs folder
(it is the folder's name, created exclusively, also across ``--workers``), and one session
plays it: a second session of a name on file, live or finished, is refused. So a ticket
buys one submission played in one session, and a submitter cannot open a second session to
play the same sealed tasks in lockstep (probe a task with a throwaway action in one, use
the outcome in the other: without tickets that lifted MathRoute's reward from 0.710 to
0.891, docs/board-referee.md). The sandboxed re-execution's private referee (``only``)
takes no ticket: it accepts one name, once.

What refereed play does not stop (say so next to the board): the client sees the sealed
tasks' prompts, so two submitters who pool their tickets (or one who gets two) can still
compare the same sealed tasks; give each submitter one ticket per board and rotate the
sealed plan when it has been played often.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import gymnasium as gym

from orchenv.error import ConfigError, DataError, EnvStateError
from orchenv.pool import UsageMeter
from orchenv.runner import EpisodeRecord, episode_metrics, pool_agents
from orchenv.serve.environment import (
    OrchAction,
    OrchObservation,
    OrchServeEnvironment,
    OrchState,
    session_log,
)
from orchenv.serve.wire import safe_text

logger = logging.getLogger(__name__)

#: a submission's name: its run folder's name under ``--runs``
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
#: the metric an abandoned or never-started episode carries
ABANDONED = "referee_abandoned"
#: files the signature binds
RECORD_FILES = ("run.json", "episodes.jsonl", "summary.json")
#: the format field of the signed file (the one ``orchenv board play`` writes)
SIGNED_FORMAT = "orchenv-sealed-run"


#: what every ticket starts with
TICKET_PREFIX = "ticket-"


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError(
            "a submission name is 1 to 64 characters of letters, digits, '.', '_' and '-', "
            "starting with a letter or digit (it names the run folder); got "
            f"{str(name)[:80]!r}"
        )


def issue_ticket(spec: Mapping[str, Any], key: bytes, name: str) -> str:
    """The ticket that admits submission ``name`` to ``spec``'s referee: an HMAC of the name
    and the spec hash under the board's ``key`` (128 bits, hex). The maintainer hands it to
    the one submitter who plays under ``name``. ``ConfigError`` for a name ``NAME_RE``
    refuses, a board without a sealed plan or a key that is not the board's."""
    from orchenv.eval.board import sealed_secret

    _check_name(name)
    sealed_secret(spec, key)  # checks the plan and the key
    mac = hmac.new(
        key,
        b"orchenv-referee-ticket:" + str(spec["spec_sha256"]).encode() + b":" + name.encode(),
        hashlib.sha256,
    )
    return TICKET_PREFIX + mac.hexdigest()[:32]


@dataclass
class RecordExtra:
    """What a re-execution adds to the referee's signed record (``orchenv.verify.sandbox``):
    ``note``, the row's words (``sealed.json``'s ``note``, ``run.json``'s ``refereed.rerun``),
    ``details`` (into ``refereed.rerun``), and ``seal``, called with the record's folder just
    before it is signed: it writes files there and returns their names, which the signature
    binds with the record (e.g. the recorded endpoint calls)."""

    note: str
    details: dict[str, Any] = field(default_factory=dict)
    seal: Callable[[Path], list[str]] | None = None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Referee:
    """One worker's referee: the board spec, the key, the sealed plan and the runs folder.

    ``board``, ``key_file`` and ``runs`` are paths; the key is read once here and never sent
    anywhere. ``ConfigError`` / ``DataError`` (naming the fix) for a board without a sealed
    plan, a key that is not the board's, or an unusable runs folder."""

    def __init__(
        self,
        board: str | os.PathLike[str],
        key_file: str | os.PathLike[str],
        runs: str | os.PathLike[str],
        only: str | None = None,
        task_file: str | os.PathLike[str] | None = None,
        extra: RecordExtra | None = None,
    ) -> None:
        from orchenv.eval.board import key_id, read_spec, sealed_plan
        from orchenv.verify.keys import read_key

        self.spec = read_spec(board)
        self.key = read_key(key_file)
        if task_file is not None:  # a board whose sealed plan reads a private task file
            seeds, self.env_kwargs = sealed_plan(self.spec, self.key, task_file)  # type: ignore[call-arg]
        else:
            seeds, self.env_kwargs = sealed_plan(self.spec, self.key)
        #: the board's sealed-plan secret, when this orchenv's envs seal themselves (the env
        #: then shows opaque task ids, ``orchenv.seeding.seal_task_id``); None: older envs,
        #: whose ids the referee makes opaque itself (``opaque``)
        secret = self.env_kwargs.get("sealed")
        self.secret: str | None = secret if isinstance(secret, str) else None
        self.seed = int(seeds[0])
        self.episodes = int(self.spec["sealed_plan"]["episodes"])
        self.key_id = key_id(self.key)
        self.env_id = str(self.spec["env_id"])
        self.only = only  # the one submission name accepted (sandboxed re-execution)
        self.extra = extra  # what a re-execution adds to the record
        self.runs = Path(runs)
        try:
            self.runs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--runs {runs}: cannot create the runs folder ({exc})") from exc
        if not self.runs.is_dir() or self.runs.is_symlink():
            raise ConfigError(f"--runs {runs} must be a directory (not a symlink)")

    def make_env(self) -> Any:
        """The env of the sealed plan: the board's kwargs with the sealed backend seed, its
        pool and split (as ``orchenv board play`` builds it)."""
        kwargs = dict(self.env_kwargs)
        kwargs["pool"] = self.spec["pool"]["name"]
        kwargs["split"] = self.spec["split"]
        return gym.make(self.env_id, **kwargs)

    def public_kwargs(self) -> dict[str, Any]:
        """The env kwargs a record shows: the secret and a private task file's path withheld
        (as ``orchenv board play`` writes them)."""
        try:
            from orchenv.eval.board import WITHHELD
        except ImportError:  # an orchenv whose board has no sealed secret
            WITHHELD = "<withheld: the board's sealed plan>"  # noqa: N806
        out = dict(self.env_kwargs)
        backend = out.get("backend_kwargs")
        public = self.spec["env_kwargs"]
        if "sealed" in out:
            out["sealed"] = WITHHELD
        if isinstance(backend, dict) and backend != public.get("backend_kwargs"):
            out["backend_kwargs"] = {**backend, "seed": WITHHELD}
        task_file = self.spec["sealed_plan"].get("task_file")
        source = out.get("task_source_kwargs")
        if isinstance(task_file, dict) and isinstance(source, dict):
            kwarg = str(task_file.get("kwarg"))
            if kwarg in source:
                out["task_source_kwargs"] = {**source, kwarg: WITHHELD}
        return dict(sorted(out.items()))

    def opaque(self, task_id: Any) -> str | None:
        """The task id shown to clients. An env sealed with the board's secret already shows
        an opaque id (``sealed-...``), passed on as it is; any other id is replaced by an HMAC
        of it under the key. Either way equal tasks get equal ids across submissions, and no
        id names a public task."""
        if task_id is None:
            return None
        if self.secret is not None and str(task_id).startswith("sealed-"):
            return str(task_id)
        mac = hmac.new(
            self.key,
            b"orchenv-referee-task:"
            + str(self.spec["spec_sha256"]).encode()
            + b":"
            + str(task_id).encode("utf-8", "backslashreplace"),
            hashlib.sha256,
        )
        return "sealed-" + mac.hexdigest()[:20]

    def ticket(self, name: str) -> str:
        """The ticket that admits submission ``name`` (``issue_ticket``)."""
        return issue_ticket(self.spec, self.key, name)

    def _admit(self, name: str, ticket: Any) -> None:
        """``ConfigError`` unless ``ticket`` is ``name``'s (no ticket needed with ``only``)."""
        if self.only is not None:
            if name != self.only:
                raise ConfigError(
                    f"this referee plays one submission, {self.only!r}: open that one"
                )
            return
        if ticket is None:
            raise ConfigError(
                "this referee admits a submission with its ticket: "
                "reset(submission='NAME', ticket='ticket-...'); ask the board's maintainer "
                "for the ticket of your submission name (one per submitter)"
            )
        if not isinstance(ticket, str) or len(ticket) > 200:
            raise ConfigError(
                f"a ticket is a string of at most 200 characters, got {type(ticket).__name__}"
            )
        if not hmac.compare_digest(
            ticket.encode("utf-8", "backslashreplace"), self.ticket(name).encode()
        ):
            raise ConfigError(
                f"this ticket does not admit submission {name!r}: a ticket admits the one "
                "name it was issued for (ask the board's maintainer for yours)"
            )

    def open(self, name: Any, ticket: Any = None) -> Submission:
        """A new submission ``name`` admitted by ``ticket`` (``ticket``; not needed with
        ``only``); its run folder is created now, exclusively, so each name is played once,
        in one session."""
        _check_name(name)
        self._admit(name, ticket)
        folder = self.runs / name
        try:
            folder.mkdir()
        except FileExistsError as exc:
            live = not os.path.lexists(folder / "sealed.json")
            raise ConfigError(
                f"submission {name!r} is "
                + (
                    "being played in another session (or was cut off when the server "
                    "stopped): a submission is played in one session, so that no two "
                    "sessions see its sealed tasks side by side"
                    if live
                    else "already on file on this server: every submission is kept (played once)"
                )
                + "; a new submission needs a new name and its ticket"
            ) from exc
        except OSError as exc:
            raise ConfigError(f"cannot create the run folder of {name!r}: {exc}") from exc
        try:
            return Submission(self, name, folder)
        except Exception:
            logger.exception("submission %s could not start", name)
            raise


class _Episode:
    """The episode being played: what ``orchenv.runner.run_episode`` tallies, server-side."""

    def __init__(self, index: int, info: Mapping[str, Any]) -> None:
        self.index = index
        self.started = time.monotonic()
        self.task_id = str(info.get("task_id", ""))
        self.total = 0.0
        self.invalid = 0
        self.cut = 0
        self.actions: list[str] = []
        self.info: Mapping[str, Any] = info
        self.done = False


def _cut_calls(info: Mapping[str, Any]) -> int:
    calls = info.get("calls")
    if not isinstance(calls, list):
        return 0
    return sum(1 for c in calls if isinstance(c, Mapping) and c.get("truncated") is True)


class Submission:
    """One client's refereed run of the sealed plan; its record is under ``folder``.

    Every method holds ``lock``: a session's messages are sequential, but the server may
    close an idle session from another thread."""

    def __init__(self, referee: Referee, name: str, folder: Path) -> None:
        from orchenv.eval.harness import EpisodeLog, controller_label, run_key
        from orchenv.eval.rundir import SCHEMA, line_header, write_json_atomic

        self.referee, self.name, self.folder = referee, name, folder
        self.lock = threading.Lock()
        self.env = referee.make_env()
        unwrapped = self.env.unwrapped
        # as the harness: a probe reset builds the pool, then the seed starts fresh
        self.env.reset(seed=self._episode_seed(0))
        loader = getattr(unwrapped, "load_lifetime_state", None)
        if callable(loader):
            loader(None)
        spec = referee.spec
        self.identity = {
            "env_id": referee.env_id,
            "env_kwargs": referee.public_kwargs(),
            "pool": spec["pool"]["name"],
            "split": spec["split"],
            "controller": name,
            "controller_kwargs": {},
        }
        self.run_key = run_key(self.identity)
        self.agents = pool_agents(self.env)
        self.run_info: dict[str, Any] = {
            "schema": SCHEMA,
            **self.identity,
            "run_key": self.run_key,
            "seeds": [referee.seed],
            "episodes": referee.episodes,
            "controller_label": controller_label(name, {}),
            "agents": self.agents,
            "privileged": False,
            "episode_seed": "seed * 1000003 + episode",
            "refereed": {
                "submission": name,
                "status": "playing",
                "started": _now(),
                "finished": None,
                "episodes_played": 0,
                "episodes_abandoned": 0,
                "board": spec["spec_sha256"],
            },
        }
        if referee.extra is not None:
            self.run_info["refereed"]["rerun"] = {
                **referee.extra.details,
                "note": referee.extra.note,
            }
        write_json_atomic(folder / "run.json", self.run_info)
        self.log = EpisodeLog(
            folder / "episodes.jsonl", header=line_header(self.identity, self.run_key)
        )
        self.records: dict[int, EpisodeRecord] = {}
        self.next = 0  # the plan index the next reset starts
        self.current: _Episode | None = None
        self.closed = False
        logger.info("submission %s opened (%d sealed episodes)", name, referee.episodes)

    # -- playing -------------------------------------------------------------------------------
    def _episode_seed(self, index: int) -> int:
        from orchenv.eval.rundir import episode_seed

        return episode_seed(self.referee.seed, index)

    def progress(self) -> dict[str, Any]:
        """What the client is told about its submission (public: no seed, no task)."""
        return {
            "submission": self.name,
            "episode": (self.current.index + 1) if self.current else self.next,
            "episodes": self.referee.episodes,
            "finished": self.closed,
        }

    def start(self) -> tuple[Any, dict[str, Any]]:
        """Start the next sealed task: (observation, info)."""
        with self.lock:
            if self.closed:
                raise EnvStateError(
                    f"submission {self.name!r} is closed: all {self.referee.episodes} sealed "
                    "tasks were counted; open a new session to start another submission"
                )
            if self.current is not None and not self.current.done:
                raise EnvStateError(
                    f"episode {self.current.index + 1} of {self.referee.episodes} is "
                    "unfinished: step it to its end. A referee never skips a task (closing "
                    "the session counts it as played, with its return so far)"
                )
            index = self.next
            if index >= self.referee.episodes:  # never: the last episode's end closes it
                raise EnvStateError(f"submission {self.name!r} has played every sealed task")
            obs, info = self.env.reset(seed=self._episode_seed(index))
            self.current = _Episode(index, info)
            self.next = index + 1
            return obs, dict(info)

    def step(self, text: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        with self.lock:
            episode = self.current
            if self.closed or episode is None or episode.done:
                raise EnvStateError(
                    "no episode is being played: reset() starts the next sealed task"
                    if not self.closed
                    else f"submission {self.name!r} is closed"
                )
            if len(episode.actions) >= 10_000:
                raise EnvStateError("episode did not end within 10,000 steps")
            obs, reward, terminated, truncated, info = self.env.step(text)
            episode.actions.append(text)
            episode.total += float(reward)
            episode.invalid += int(bool(info.get("invalid_action")))
            episode.cut += _cut_calls(info)
            episode.info = info
            if terminated or truncated:
                episode.done = True
                self._log(episode, self._record(episode, finished=True))
                if self.next >= self.referee.episodes:
                    self._finish("complete")
            return obs, float(reward), bool(terminated), bool(truncated), dict(info)

    def close(self) -> None:
        """The session ended: count what was not played (module docstring) and sign."""
        with self.lock:
            if self.closed:
                return
            episode = self.current
            if episode is not None and not episode.done:
                episode.done = True
                self._log(episode, self._record(episode, finished=False))
            for index in range(self.next, self.referee.episodes):
                _, info = self.env.reset(seed=self._episode_seed(index))
                self._log(_Episode(index, info), self._unplayed(str(info.get("task_id", ""))))
            self.next = self.referee.episodes
            self._finish("abandoned")

    # -- the record ------------------------------------------------------------------------------
    def _record(self, episode: _Episode, finished: bool) -> EpisodeRecord:
        """``run_episode``'s record, built from what the server saw."""
        info = episode.info
        meter = getattr(self.env.unwrapped, "meter", None) or UsageMeter()
        metrics = episode_metrics(info)
        metrics["truncated_calls"] = float(episode.cut)
        if meter.metering_checked:
            metrics["metering_checked"] = float(meter.metering_checked)
            metrics["metering_disagreements"] = float(meter.metering_disagreements)
        correct = bool(info.get("correct", False)) if finished else False
        score = float(info.get("score", float(correct))) if finished else 0.0
        if not finished:
            metrics[ABANDONED] = 1.0
        final = info.get("final_answer") if finished else None
        return EpisodeRecord(
            task_id=episode.task_id,
            correct=correct,
            score=score if math.isfinite(score) else 0.0,
            reward=episode.total,
            turns=int(info.get("turns", len(episode.actions))),
            cost_usd=float(info.get("episode_cost_usd", 0.0)),
            prompt_tokens=meter.prompt_tokens,
            completion_tokens=meter.completion_tokens,
            agent_calls=dict(info.get("agent_calls", {})),
            invalid_actions=episode.invalid,
            latency_s=meter.latency_s,
            cached_calls=meter.cached_calls,
            estimated_calls=meter.estimated_calls,
            actions=list(episode.actions),
            final_answer=final if isinstance(final, str) else None,
            metrics=metrics,
        )

    @staticmethod
    def _unplayed(task_id: str) -> EpisodeRecord:
        return EpisodeRecord(
            task_id=task_id,
            correct=False,
            score=0.0,
            reward=0.0,
            turns=0,
            cost_usd=0.0,
            prompt_tokens=0,
            completion_tokens=0,
            agent_calls={},
            invalid_actions=0,
            metrics={ABANDONED: 1.0},
        )

    def _log(self, episode: _Episode, record: EpisodeRecord) -> None:
        from orchenv.eval.rundir import episode_row

        getter = getattr(self.env.unwrapped, "lifetime_state", None)
        state = getter() if callable(getter) else None
        row = episode_row(
            self.referee.seed, episode.index, record, time.monotonic() - episode.started, state
        )
        self.log.append(row)
        self.records[episode.index] = record
        if record.metrics.get(ABANDONED):
            self.run_info["refereed"]["episodes_abandoned"] += 1
        else:
            self.run_info["refereed"]["episodes_played"] += 1

    def _check_withheld(self, extra_files: list[str]) -> None:
        """The record never holds the board's secret (``DataError`` if it does: a bug)."""
        secret = self.referee.secret
        if secret is None:
            return
        needle = secret.encode()
        for name in [*RECORD_FILES, *extra_files]:
            with open(self.folder / name, "rb") as fh:
                tail = b""
                while chunk := fh.read(1 << 20):  # in chunks: a recording may be large
                    if needle in tail + chunk:
                        raise DataError(f"{self.folder / name} holds the board's sealed secret")
                    tail = chunk[-len(needle) :]

    def _finish(self, status: str) -> None:
        """Write summary.json, the final run.json and the signed sealed.json."""
        from orchenv.eval.board import SEALED_FILE
        from orchenv.eval.harness import build_summary
        from orchenv.eval.rundir import write_json_atomic
        from orchenv.verify.bundle import file_digests
        from orchenv.verify.keys import SIGNATURE, sign

        self.closed = True
        try:
            self.log.close()
        except Exception:  # noqa: BLE001 - the lines are written; the record goes on
            logger.exception("submission %s: closing its episode log failed", self.name)
        self.run_info["refereed"].update(status=status, finished=_now())
        write_json_atomic(self.folder / "run.json", self.run_info)
        seed = self.referee.seed
        records = {(seed, i): self.records[i] for i in sorted(self.records)}
        summary, _, _ = build_summary(self.run_info, records, self.agents, False)
        write_json_atomic(self.folder / "summary.json", summary)
        extra_files: list[str] = []
        extra = self.referee.extra
        if extra is not None and extra.seal is not None:
            extra_files = [n for n in extra.seal(self.folder) if n not in RECORD_FILES]
        self._check_withheld(extra_files)
        body: dict[str, Any] = {
            "format": SIGNED_FORMAT,
            "how": "refereed",
            "submission": self.name,
            "status": status,
            "spec_sha256": self.referee.spec["spec_sha256"],
            "key_id": self.referee.key_id,
            "files": file_digests(self.folder, [*RECORD_FILES, *extra_files]),
        }
        if extra is not None:
            body["note"] = extra.note
        body[SIGNATURE] = sign(body, self.referee.key)
        write_json_atomic(self.folder / SEALED_FILE, body)
        try:
            self.env.close()
        except Exception:  # noqa: BLE001
            logger.debug("closing submission %s's env failed", self.name, exc_info=True)
        logger.info(
            "submission %s %s: %d played, %d abandoned; signed record in %s",
            self.name,
            status,
            self.run_info["refereed"]["episodes_played"],
            self.run_info["refereed"]["episodes_abandoned"],
            self.folder,
        )


def read_record(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """A refereed record's ``sealed.json`` body (``DataError`` when it is unreadable)."""
    from orchenv.eval.rundir import read_json_file

    path = Path(folder) / "sealed.json"
    data = read_json_file(path)
    if data.get("format") != SIGNED_FORMAT:
        raise DataError(f"{path} is not a signed sealed run (format {data.get('format')!r})")
    return data


def wire_copy(info: Mapping[str, Any], referee: Referee, progress: Mapping[str, Any]) -> dict:
    """``info`` as a refereed client sees it: the task id made opaque, the submission's
    progress under ``referee``."""
    out = dict(info)
    if "task_id" in out:
        out["task_id"] = referee.opaque(out["task_id"])
    out["referee"] = dict(progress)
    return out


class RefereeEnvironment(OrchServeEnvironment):
    """A refereed session (``orchenv serve --referee``): its first reset opens a submission
    (``reset(submission="NAME")``), each later ``reset()`` starts the next sealed task; see
    the module docstring for what is refused."""

    def __init__(self) -> None:
        super().__init__()
        self._submission: Submission | None = None

    @property
    def _referee(self) -> Referee:
        referee = self.runtime.referee
        assert referee is not None  # build_app serves this class only with a referee
        return referee

    def reset(  # type: ignore[override]
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        submission: str | None = None,
        ticket: str | None = None,
        **kwargs: Any,
    ) -> OrchObservation:
        self._check_open()
        chosen = sorted(k for k, v in kwargs.items() if v is not None)
        if seed is not None:
            chosen.insert(0, "seed")
        if chosen:
            raise ConfigError(
                f"a refereed server assigns the tasks itself: reset takes no "
                f"{[safe_text(str(k))[:40] for k in chosen][:8]}. The first reset of a "
                "session opens a submission (reset(submission='NAME')); each later reset() "
                "starts the next sealed task"
            )
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 200):
            raise ConfigError("episode_id is a string of at most 200 characters")
        if self._submission is None:
            if submission is None:
                raise ConfigError(
                    "this server is a board's referee: open a submission with the first "
                    "reset of the session, reset(submission='NAME', ticket='...') "
                    "(docs/board-referee.md)"
                )
            self._submission = self._referee.open(submission, ticket)
        elif submission is not None and submission != self._submission.name:
            raise ConfigError(
                f"this session plays submission {self._submission.name!r}; open another "
                "session for another submission"
            )
        obs, info = self._submission.start()
        self._resets += 1
        self._steps = 0
        self._episode_id = episode_id
        self._last = {"prompt": obs, "info": self._shown(info), "reward": 0.0, "seed": None}
        self._last.update(terminated=False, truncated=False)
        session_log.info(
            "session %d submission %s: episode %d of %d",
            self._index,
            self._submission.name,
            self._submission.next,
            self._referee.episodes,
        )
        return self._observation(self._last)

    def step(  # type: ignore[override]
        self, action: OrchAction, timeout_s: float | None = None, **kwargs: Any
    ) -> OrchObservation:
        self._check_open()
        if self._submission is None:
            raise EnvStateError("no submission in this session: reset(submission='NAME') opens one")
        obs, reward, terminated, truncated, info = self._submission.step(action.text)
        self._steps += 1
        self._last = {"prompt": obs, "info": self._shown(info), "reward": reward, "seed": None}
        self._last.update(terminated=terminated, truncated=truncated)
        return self._observation(self._last)

    def _shown(self, info: Mapping[str, Any]) -> dict[str, Any]:
        assert self._submission is not None
        return wire_copy(info, self._referee, self._submission.progress())

    @property
    def state(self) -> OrchState:
        sub = self._submission
        info = (self._last or {}).get("info") or {}
        return OrchState(
            episode_id=self._episode_id,
            step_count=self._steps,
            env_id=self.runtime.config.env_id,
            seed=None,
            task_id=info.get("task_id"),
            turn=int(getattr(sub.env.unwrapped, "turn", 0) or 0) if sub else 0,
            done=bool(self._last and (self._last["terminated"] or self._last["truncated"])),
            snapshot=None,
            fork="a refereed server does not fork",
            worker=os.getpid(),
        )

    def close(self) -> None:
        sub, self._submission = self._submission, None
        if sub is not None:
            try:
                sub.close()
            except Exception:  # noqa: BLE001 - never lose the session's close over it
                logger.exception("submission %s could not be closed cleanly", sub.name)
        self._env = None  # the submission owns (and closed) its env
        super().close()

    # the task API lists the public tasks: off on a referee
    def _tasks(self) -> Any:
        raise ConfigError("the task API is off on a refereed server (the board's tasks are sealed)")


RefereeEnvironment.reset.__signature__ = inspect.signature(  # type: ignore[attr-defined]
    RefereeEnvironment.reset
)


def main(argv: list[str] | None = None) -> int:
    """``python -m orchenv.serve.referee ticket --board B --key K NAME...``: print each
    name's ticket (``NAME<TAB>TICKET``), to hand to the one submitter who plays it."""
    import argparse
    import sys

    from orchenv.error import OrchEnvError

    parser = argparse.ArgumentParser(
        prog="python -m orchenv.serve.referee",
        description="issue the tickets that admit submissions to a refereed board",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    tick = sub.add_parser("ticket", help="print the ticket of each submission name")
    tick.add_argument("names", nargs="+", metavar="NAME")
    tick.add_argument("--board", required=True, help="the board file (orchenv board init)")
    tick.add_argument("--key", required=True, help="the board's key file")
    args = parser.parse_args(argv)
    try:
        from orchenv.eval.board import read_spec
        from orchenv.verify.keys import read_key

        spec, key = read_spec(args.board), read_key(args.key)
        lines = [f"{name}\t{issue_ticket(spec, key, name)}" for name in args.names]
    except OrchEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


__all__ = [
    "ABANDONED",
    "RecordExtra",
    "TICKET_PREFIX",
    "issue_ticket",
    "main",
    "RefereeEnvironment",
    "NAME_RE",
    "RECORD_FILES",
    "Referee",
    "Submission",
    "read_record",
    "wire_copy",
]


if __name__ == "__main__":
    raise SystemExit(main())
