"""Running an app's episodes against the endpoint, and serving their calls in batches.

``run_episodes(team, env, examples, copies, ...)`` starts ``copies`` episodes of every example,
each on its own thread with a client pointed at its own base URL, and serves their calls until
every episode has returned. Returns one ``EpisodeRecord`` per episode: its calls (prompt ids,
the sampler's completion and log-probs) and its rewards.

The batching is a barrier, never a timing window. An episode is *blocked* when a call of it
waits at the endpoint, *finished* when its function has returned; while some episode is
neither (it is running its own code, or its request is on the wire), the rollout waits. When
every live episode is blocked, the waiting calls go to the engines as one ``Team.generate``
(one generate per engine), ordered by (episode, the order the episode sent them); their
replies release the episodes, and the next barrier forms. An episode whose calls follow one
another therefore meets the same batches in the same order on every run from the same
weights and RNG state, so sampling is reproducible and a resumed run equals an uninterrupted
one. (Calls an episode sends concurrently are served too; their order within the episode is
the order they arrived.) An episode has at most ``endpoint.max_batch_calls`` calls in one
batch; one more is refused (429) at once.

A prompt that cannot fit the model's context by its length alone is refused before the
tokenizer reads it: no token stands for more characters than the vocabulary's longest entry,
so a prompt of C characters is at least C / longest tokens, give or take what a normalizer
merges (``refuse_too_long``).

Every reply names the weights that answered it (``system_fingerprint``: the agent, the
weights' step and hash, ``teamrl.apps.provenance``), read from the engines right after they
sample; the call's ``Served`` record keeps the same stamp for its sample.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from teamrl.apps.endpoint import ChatCall, Endpoint, Refusal, shared_endpoint
from teamrl.apps.provenance import Stamp, stamp
from teamrl.apps.task import AppEnv
from teamrl.apps.tools import (
    for_template,
    forced_opening,
    read_reply,
    renders_tools,
    reply_stops,
)
from teamrl.config.endpoint import EndpointConfig
from teamrl.errors import user_frame
from teamrl.generation import Generation
from teamrl.rollout.common import RewardError, RolloutClock, as_reward
from teamrl.team.policies import Team

CLIENT_TIMEOUT_S = 24 * 3600.0  # a call waits at a barrier as long as the batch takes
WAIT_S = 0.2  # how often a waiting rollout looks up (only so Ctrl-C is seen; never a deadline)


@dataclass
class Served:
    """One call the endpoint answered with a generation: what becomes a ``Sample``."""

    agent: str
    index: int  # the agent's k-th call in its episode (0, 1, ...)
    order: int  # the call's place among all the episode's served calls
    prompt_ids: list[int]
    generation: Generation
    # response_prefix + the forced call opening (endpoint.prefill_tool_calls) + completion, cut
    # at a stop string (before any tool call is read)
    text: str
    weights: Stamp | None = None  # which weights answered (teamrl.apps.provenance)
    tools_offered: bool = False  # the call gave tools
    tool_calls: int = 0  # valid tool calls read from the reply (teamrl.apps.tools)


@dataclass
class EpisodeRecord:
    problem: int  # dataset index of the example
    slot: int  # the example's position in the batch
    index: int  # the episode's number among its example's copies
    calls: list[Served] = field(default_factory=list)
    team_reward: float = 0.0
    local_rewards: dict[str, float] = field(default_factory=dict)
    refused: int = 0  # calls answered with an error (over the context, bad messages)
    unparsed_tool_calls: int = 0  # replies returned as text where tools were offered (tools.py)


@dataclass
class Waiting:
    episode: int
    seq: int  # arrival order within its episode
    call: ChatCall
    reply: Future


class Session:
    """One rollout's episodes on the endpoint (the ``CallSink`` its server hands calls to)."""

    def __init__(
        self,
        team: Team,
        n: int,
        greedy: bool,
        ignore_eos: bool,
        timeout: float = 0.0,
        max_batch_calls: int = 0,
        prefill_tool_calls: bool = False,
    ):
        """``timeout``: seconds the episodes may go without a call or a return (0: no limit);
        ``max_batch_calls``: calls one episode may have waiting at once (0: no limit);
        ``prefill_tool_calls``: write the call a tool_choice demands into the reply's start."""
        self.team, self.n, self.greedy, self.ignore_eos = team, n, greedy, ignore_eos
        self.prefill_tool_calls = prefill_tool_calls
        self.timeout = float(timeout or 0.0)
        self.max_batch_calls = max_batch_calls
        self._moved = time.monotonic()  # the last call, return or reply
        self.agents = list(team.agents)
        self.calls: list[list[Served]] = [[] for _ in range(n)]
        self.refused = [0] * n
        self.unparsed = [0] * n  # replies to calls with tools that read as no valid call
        self.results: list[Any] = [None] * n
        self.errors: dict[int, BaseException] = {}
        self.finished: set[int] = set()
        self._waiting: dict[int, list[Waiting]] = {}
        self._seq = [0] * n
        self._closed: str | None = None
        self._cond = threading.Condition()

    # --- the server's side and the episodes' side -----------------------------------------------

    def submit(self, episode: int, call: ChatCall) -> Future:
        reply: Future = Future()
        with self._cond:
            if self._closed or episode in self.finished:
                why = self._closed or f"episode {episode} has returned"
                reply.set_result((410, Refusal(410, why, "episode_ended").body()))
                return reply
            waiting = self._waiting.setdefault(episode, [])
            if self.max_batch_calls and len(waiting) >= self.max_batch_calls:
                self.refused[episode] += 1
                reply.set_result((429, too_many_calls(len(waiting)).body()))
                return reply
            waiting.append(Waiting(episode, self._seq[episode], call, reply))
            self._seq[episode] += 1
            self._moved = time.monotonic()
            self._cond.notify_all()
        return reply

    def finish(self, episode: int, value: Any = None, error: BaseException | None = None):
        with self._cond:
            self.finished.add(episode)
            if error is None:
                self.results[episode] = value
            else:
                self.errors[episode] = error
            self._moved = time.monotonic()
            self._cond.notify_all()

    # --- the rollout's side -------------------------------------------------------------------

    def serve(self, clock: RolloutClock) -> None:
        """Serve batches until every episode has returned (or one has raised)."""
        while True:
            with self._cond:
                while not self._barrier():
                    self._cond.wait(WAIT_S)
                    self._check_stalled()
                if self.errors or len(self.finished) == self.n:
                    return
                batch = sorted(
                    (w for ws in self._waiting.values() for w in ws),
                    key=lambda w: (w.episode, w.seq),
                )
                self._waiting.clear()
            with clock.generating():
                clock.tokens += self._answer(batch)
            self._moved = time.monotonic()

    def _check_stalled(self) -> None:
        """A guard, not the batching rule: episodes that neither call nor return for
        ``timeout`` seconds (an app hung in its own code) fail the rollout, named."""
        if not self.timeout or time.monotonic() - self._moved <= self.timeout:
            return
        stuck = [i for i in range(self.n) if i not in self.finished and not self._waiting.get(i)]
        self.errors[stuck[0]] = TimeoutError(
            f"no call and no return for {self.timeout:g} s (env.step_timeout); episodes "
            f"running their own code: {stuck}"
        )

    def _barrier(self) -> bool:
        """Every episode blocked on a call or finished (or one failed)."""
        if self.errors:
            return True
        blocked = sum(1 for e, ws in self._waiting.items() if ws and e not in self.finished)
        return blocked + len(self.finished) == self.n

    def _answer(self, batch: list[Waiting]) -> int:
        """Encode, generate (one call per engine) and reply to every call of the batch."""
        jobs, ready = [], []
        for w in batch:
            try:
                ids, opening = self._prompt(w.call)
            except Refusal as r:
                with self._cond:
                    self.refused[w.episode] += 1
                w.reply.set_result((r.status, r.body()))
                continue
            request = self.team.request(w.call.agent, ids, 1, greedy=self.greedy)
            # the call's own stop strings, and where it uses tools a tool result's tags
            asked = tuple(dict.fromkeys(w.call.stop + reply_stops(w.call.messages, w.call.tools)))
            cap = request.max_new_tokens
            most = min(cap, w.call.max_tokens or cap)
            request = dataclasses.replace(
                request,
                max_new_tokens=most,
                # a call's max_tokens below the agent's minimum wins: the reply fits the call
                min_new_tokens=min(request.min_new_tokens, most),
                stop=tuple(dict.fromkeys(request.stop + asked)),
            )
            jobs.append((w.call.agent, request))
            ready.append((w, ids, opening, request.min_new_tokens, asked))
        if not jobs:
            return 0
        try:
            outs = self.team.generate(jobs, ignore_eos=self.ignore_eos)
            # the weights that sampled, per agent (stale ones raise in synchronous training)
            stamps = {agent: stamp(self.team, agent) for agent in dict(jobs)}
        except BaseException:
            for w, *_ in ready:
                w.reply.set_result((410, Refusal(410, "generation failed", "episode_ended").body()))  # fmt: skip
            raise
        tokens = 0
        for (w, ids, opening, least, asked), out in zip(ready, outs):
            gen = out[0]
            agent = w.call.agent
            text = self.team.decode(agent, gen.completion_ids, opening, least, stops=asked)
            # a call's stop string is not part of the reply (OpenAI's rule); an agent's own
            # stop strings are, as in every env's text
            text = next((text.removesuffix(s) for s in asked if text.endswith(s)), text)
            mine = self.calls[w.episode]
            index = sum(1 for c in mine if c.agent == agent)
            served = Served(agent, index, len(mine), ids, gen, text, weights=stamps[agent])
            mine.append(served)
            w.reply.set_result((200, self._reply(w, served, len(mine) - 1)))
            tokens += len(gen.completion_ids)
        return tokens

    def _prompt(self, call: ChatCall) -> tuple[list[int], str]:
        """The call's prompt ids: its messages (and tools) through the agent's chat template,
        in the template's own tool format or the fallback one (``teamrl.apps.tools``), ending
        with the opening of the call its tool_choice demands when the endpoint writes it
        (``prefill_tool_calls``); and that opening ("" when none)."""
        limit = context_length(self.team, call.agent)
        new = min(self.team.agents[call.agent].max_completion_length, call.max_tokens or 10**9)
        tokenizer = self.team.engine_of(call.agent).tokenizer
        native = bool(self.team.cfg.team.chat_template) and renders_tools(tokenizer)
        messages, tools = for_template(call.messages, call.tools, native)
        if limit is not None:  # the contents, which every template renders whole
            refuse_too_long(messages, longest_token(tokenizer), limit, new)
        opening = ""
        if self.prefill_tool_calls:
            opening = forced_opening(call.tool_choice, call.tools)
        try:
            ids = self.team.encode_messages(call.agent, messages, tools=tools, prefill=opening)
        except Exception as err:  # a template that rejects the roles (e.g. two system turns)
            raise Refusal(400, f"the chat template refused the messages: {err}", "invalid_messages") from None  # fmt: skip
        if limit is not None and len(ids) + new > limit:
            raise Refusal(
                400,
                f"the prompt is {len(ids)} tokens and the reply may take {new}: more than the "
                f"model's context of {limit} tokens",
                "context_length_exceeded",
            )
        return ids, opening

    def _reply(self, w: Waiting, served: Served, k: int) -> dict:
        ids, gen, text = served.prompt_ids, served.generation, served.text
        tok = self.team.engine_of(w.call.agent).tokenizer
        logprobs = None
        if w.call.logprobs:
            logprobs = {
                "content": [
                    {"token": (t := tok.decode([i])), "logprob": lp,
                     "bytes": list(t.encode()), "top_logprobs": []}
                    for i, lp in zip(gen.completion_ids, gen.logprobs)
                ]
            }  # fmt: skip
        # the reply's tool calls: what the app is told; the sample keeps the sampled tokens
        call = w.call
        reading = read_reply(text, call.tools, call.tool_choice, call.parallel_tool_calls)
        if reading.unparsed:
            with self._cond:
                self.unparsed[w.episode] += 1
        served.tools_offered, served.tool_calls = bool(call.tools), len(reading.calls)
        message: dict[str, Any] = {"role": "assistant", "content": reading.content}
        if reading.calls:  # ids unique in the episode, and the same on every run
            message["tool_calls"] = [
                {"id": f"call_{w.episode}_{k}_{j}", "type": "function", "function": fn}
                for j, fn in enumerate(reading.calls)
            ]
        finish = "tool_calls" if reading.calls else "length" if gen.truncated else "stop"
        n_new = len(gen.completion_ids)
        return {
            "id": f"chatcmpl-{w.episode}-{k}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": call.agent,
            "system_fingerprint": served.weights.fingerprint if served.weights else None,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": logprobs}
            ],
            "usage": {
                "prompt_tokens": len(ids),
                "completion_tokens": n_new,
                "total_tokens": len(ids) + n_new,
            },
        }

    def close(self, why: str) -> None:
        """End the session: every waiting call, and any later one, is answered 410."""
        with self._cond:
            self._closed = why
            waiting = [w for ws in self._waiting.values() for w in ws]
            self._waiting.clear()
        for w in waiting:
            w.reply.set_result((410, Refusal(410, why, "episode_ended").body()))


def too_many_calls(waiting: int) -> Refusal:
    return Refusal(
        429,
        f"this episode has {waiting} calls waiting for the batch already, the most one "
        "episode may have in a batch (endpoint.max_batch_calls): wait for replies before "
        "sending more, or raise endpoint.max_batch_calls",
        "too_many_calls",
        "requests",
    )


# A normalizer may merge characters before the vocabulary sees them (NFC composes up to three
# code points, e.g. Hangul jamo, into one): the length check allows this many per character.
NORMALIZER_MERGE = 4
_LONGEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def longest_token(tokenizer: Any) -> int | None:
    """The most characters one token of ``tokenizer`` stands for: its vocabulary's longest
    entry (a byte-level vocabulary spells each byte as one character, a byte-fallback token
    as six, so this bounds bytes too), or None when it shows no vocabulary."""
    try:
        return _LONGEST[tokenizer]
    except (KeyError, TypeError):
        pass
    try:
        value = max(map(len, tokenizer.get_vocab()), default=0) or None
    except (AttributeError, NotImplementedError, TypeError):
        return None
    try:
        _LONGEST[tokenizer] = value
    except TypeError:  # not weakly referable: computed again next time
        pass
    return value


def refuse_too_long(
    messages: list[dict[str, Any]], longest: int | None, limit: int, new: int
) -> None:
    """Refuse, before tokenizing, messages whose characters cannot fit the context: C
    characters need at least C / (longest x NORMALIZER_MERGE) tokens, more than the
    ``limit - new`` the prompt has when C exceeds that times ``limit - new``. Costs one pass
    over the lengths, where the tokenizer would take seconds on megabytes."""
    if longest is None:
        return
    chars = sum(len(m["content"]) for m in messages)
    room = max(0, limit - new)
    if chars > room * longest * NORMALIZER_MERGE:
        raise Refusal(
            400,
            f"the messages hold {chars:,} characters, more than a prompt of {room} tokens can "
            f"(the model's context of {limit} tokens less the reply's {new}; one token spells "
            f"at most {longest} characters): refused before tokenizing",
            "context_length_exceeded",
        )


def context_length(team: Team, agent: str) -> int | None:
    """The model's context (``max_position_embeddings``), or None where it is not known here
    (a Ray controller holds no model)."""
    model = team.engine_of(agent).model
    config = getattr(model, "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


# --- the episodes ---------------------------------------------------------------------------------


def run_episodes(
    team: Team,
    env: AppEnv,
    examples: list[tuple[int, dict]],
    copies: int,
    *,
    greedy: bool,
    ignore_eos: bool,
    clock: RolloutClock,
    endpoint: Endpoint | None = None,
    timeout: float = 0.0,
    limits: EndpointConfig | None = None,
) -> list[EpisodeRecord]:
    """``copies`` episodes of every example (in the batch's order), run concurrently; their
    calls served in barrier batches. An episode that raises, or returns something that is not
    a reward, is a ``RewardError`` naming the example, the episode and the user's frame; so
    are episodes that neither call nor return for ``timeout`` seconds (0: no limit).
    ``limits``: the run's ``endpoint`` section, for the shared endpoint (None: as it is)."""
    endpoint = endpoint or shared_endpoint(limits)
    records = [
        EpisodeRecord(problem, slot, c)
        for slot, (problem, _) in enumerate(examples)
        for c in range(copies)
    ]
    # The prefill shapes what this run trains on, so it comes from this run's section (its
    # default when none is given), never from a shared endpoint's limits, which a run that
    # passes none leaves as the previous run set them.
    session = Session(
        team, len(records), greedy, ignore_eos, timeout, endpoint.limits.max_batch_calls,
        prefill_tool_calls=(limits or EndpointConfig()).prefill_tool_calls,
    )  # fmt: skip
    ids = endpoint.register(session, len(records))
    try:
        for i, rec in enumerate(records):
            example = examples[rec.slot][1]
            url = endpoint.episode_url(ids[i])
            threading.Thread(
                target=_run_one,
                args=(session, i, env, example, url, endpoint.api_key),
                daemon=True,  # an app that hangs outside its calls cannot keep Python alive
                name=f"teamrl-episode-{i}",
            ).start()
        session.serve(clock)
    finally:
        session.close("the rollout has ended")
        endpoint.unregister(ids)
    for i, rec in enumerate(records):
        where = f"example {rec.problem} (slot {rec.slot}), episode {rec.index}"
        if i in session.errors:
            err = session.errors[i]
            raise RewardError(f"{where}: the app's episode raised {user_frame(err)}") from err
    for i, rec in enumerate(records):
        where = f"example {rec.problem} (slot {rec.slot}), episode {rec.index}"
        rec.calls, rec.refused = session.calls[i], session.refused[i]
        rec.unparsed_tool_calls = session.unparsed[i]
        rec.team_reward, rec.local_rewards = episode_rewards(session.results[i], team, where)
    return records


def _run_one(session: Session, i: int, env: AppEnv, example: dict, url: str, key: str) -> None:
    try:
        session.finish(i, value=_call_episode(env, example, url, key))
    except BaseException as err:  # handed to the rollout, which names it
        session.finish(i, error=err)


def _call_episode(env: AppEnv, example: dict, url: str, key: str) -> Any:
    if env.wants_url:
        out = env.episode(example, base_url=url, api_key=key)
        return asyncio.run(out) if inspect.isawaitable(out) else out
    import openai

    opts = dict(base_url=url, api_key=key, max_retries=0, timeout=CLIENT_TIMEOUT_S)
    if env.is_async:

        async def run() -> Any:
            async with openai.AsyncOpenAI(**opts) as client:
                return await env.episode(client, example)

        return asyncio.run(run())
    with openai.OpenAI(**opts) as client:
        return env.episode(client, example)


def episode_rewards(value: Any, team: Team, where: str) -> tuple[float, dict[str, float]]:
    """(team reward, {agent: local reward}) from what an episode returned: a number, or a
    number and a dict of per-agent numbers."""
    locals_: Any = {}
    if isinstance(value, tuple) and len(value) == 2:
        value, locals_ = value
    if not isinstance(locals_, dict):
        raise RewardError(
            f"{where}: reward error: the episode returned (team reward, {type(locals_).__name__}); "
            "the second item must be a dict {agent: local reward}"
        )
    unknown = sorted(map(str, set(locals_) - set(team.agents)))
    if unknown:
        raise RewardError(
            f"{where}: reward error: local rewards for {unknown}, which are not agents "
            f"({', '.join(team.agents)})"
        )
    team_reward = as_reward(value, "the team reward the episode returned", where)
    return team_reward, {
        a: as_reward(v, f"the local reward of agent {a!r}", where) for a, v in locals_.items()
    }
