"""The training loop, top to bottom:

    for step in range(max_steps):
        batch = execution.next_batch(step)   # prompts_per_step examples, recipe.rollout: samples
                                             # with rewards and returns (teamrl.execution.local: here,
                                             # on Ray, or from an asynchronous generator)
        credit.assign(result)                # advantages: group baselines or critics' GAE;
                                             # the samples that train (DAPO's filter, refill)
        for policy in team.policies:
            update_policy(policy, its samples)   # clipped PG, AdamW (none when it has no samples)
            log the LR it trained with; scheduler.step()   # LR(step) depends on the step alone
        credit.fit(step)                                 # a critic's heads regress
        execution.weights_updated(step + 1)              # the sampler may take them now
        log metrics; evaluate every K steps; checkpoint every K steps (atomically)

The trainer is the only module that knows the config, the team, the env and the algorithm; it
composes the seams: the algorithm (``teamrl.algorithms``: rollout tree, returns, group key),
the credit (``teamrl.credit``), the execution (``teamrl.execution``: where rollouts and updates
run; the update itself is ``teamrl.update``), and the run's files (``teamrl.run``: checkpoints,
data order, logs).
"""

from __future__ import annotations

import dataclasses
import inspect
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from teamrl.algorithms.registry import recipe_for
from teamrl.config import Config, ConfigError, agent_setting, dump_config, to_dict
from teamrl.credit.assign import make_credit
from teamrl.distributed import DistContext
from teamrl.envs.base import Task
from teamrl.envs.sequential import SequentialTurns
from teamrl.errors import UserCodeError, user_frame
from teamrl.execution.choose import make_execution
from teamrl.execution.protocol import Execution, UpdateJob
from teamrl.generation import fast_decode
from teamrl.plugins import task_imports
from teamrl.preflight import preflight as run_preflight
from teamrl.rollout.common import RolloutResult
from teamrl.run import checkpoints
from teamrl.run.data_stream import DataStream
from teamrl.run.export import write_team_folder
from teamrl.run.files import RunError, RunLock, log_line, remove_orphans
from teamrl.run.interrupt import (
    SecondSignal,
    StepFailed,
    StopRequest,
    TrainingInterrupted,
    failed_after_update_message,
    failed_eval_message,
    failed_save_message,
    failed_step_message,
    failed_update_message,
    unsaved,
)
from teamrl.run.logging import RunLogger, sample_rows, team_reward_key
from teamrl.run.origin import RunOrigin, origin_of, write_origin
from teamrl.run.seeding import rng_state, set_rng_state, set_seed
from teamrl.run.watch import LearningWatch
from teamrl.sample import Sample
from teamrl.scale.group import WorkerDiedError
from teamrl.tasks.registry import bind_task, built_by_registry, task_from_config
from teamrl.tasks.run_program import configure as configure_sandbox
from teamrl.team.memory import measured_memory
from teamrl.team.policies import Policy, resolve_device
from teamrl.team.weights import base_record


class Trainer:
    def __init__(
        self,
        cfg: Config,
        task: Task | None = None,
        run_dir: str | Path | None = None,
        ctx: DistContext | None = None,
        preflight: bool = True,
        execution=None,
    ):
        """``preflight``: run every check that needs no model (teamrl.preflight) before loading
        one; the CLI runs them itself and passes False. ``execution``: a factory
        (cfg, task, data, recipe) -> Execution instead of ``make_execution``'s choice (tests run the asynchronous machinery at max_staleness 0 this way)."""
        # A Config built in code gets the checks load_config makes (ranges, field pairs,
        # prompt templates that may only name fields).
        self.cfg = cfg.validate()
        self.recipe = recipe_for(cfg.algorithm.name)
        set_seed(cfg.seed)
        # every model-written program this process runs from now on, whatever built the task
        configure_sandbox(cfg.env)
        # whether the task is the registry's (run.json): a Task object made in the user's code
        # is theirs, even under a registered name
        self._task_registered = task is None or built_by_registry(task)
        self._task_file = None if self._task_registered else _source_file(task.make_env)
        self.task = task or task_from_config(cfg.env)
        if cfg.env.turn_order:
            inner = self.task.make_env
            order = list(cfg.env.turn_order)
            self.task = dataclasses.replace(
                self.task, make_env=lambda: SequentialTurns(inner(), order)
            )
        env_agents = list(self.task.make_env().agents)
        bind_task(cfg, self.task, env_agents)  # env.name and team.agents from the task if unset
        if preflight:
            run_preflight(cfg, self.task)
        self.ctx = ctx or DistContext(device=str(resolve_device(cfg.model.device)))
        self.data = DataStream(self.task.train, cfg.seed, cfg.train.shuffle, self.ctx)
        # who samples, where the policies live, how they update (teamrl.execution.local)
        self.execution: Execution = (execution or make_execution)(
            cfg, self.task, self.data, self.recipe
        )
        self.team = self.execution.team
        # advantages and which samples train: group baselines or learned critics (teamrl.credit)
        self.credit = make_credit(cfg, self.team, self.recipe.defaults.get("discount"))
        base_record(self.team, cfg)  # fingerprint the bases now, before training moves them
        self._data_state: dict | None = None  # the data position a checkpoint records
        self.step = 0
        self.nan_skips = 0
        self._saved_step: int | None = None  # the step the newest checkpoint holds
        self._updating = False  # a step's updates have begun: a failure now is half applied
        self._step_samples: list[dict] = []  # the step's samples.jsonl rows, written by the loop
        self._unwritten: dict | None = None  # log lines a loaded checkpoint kept (write_step)
        self._compile_seen = 0.0  # fast_decode compile seconds already logged as time/compile
        self.run_dir = Path(run_dir) if run_dir else Path(cfg.log.output_dir) / cfg.run_name
        self.logger: RunLogger | None = None
        self.last_eval: RolloutResult | None = None  # the latest evaluation's episodes
        self._warned_eval_on_train = False
        self._warned_few_samples: set[str] = set()  # policies told of num_mini_batches' cap

    # --- optimisation ---------------------------------------------------------------------------

    def update(self, pol: Policy, samples: list[Sample]) -> dict[str, float]:
        """One policy's update on its samples (``teamrl.update.policy``, where the
        execution runs it)."""
        return self.update_team({pol.name: samples})[pol.name]

    def update_team(self, work: dict[str, list[Sample]]) -> dict[str, dict[str, float]]:
        """The updates of the policies named in ``work``, on their samples: the execution may
        run them together (one pass for LoRA agents, ``teamrl.update.joint``)."""
        jobs = [self._job(self.team.policies[name], samples) for name, samples in work.items()]
        results = self.execution.update_team(jobs, self.cfg, step=self.step, ctx=self.ctx)
        self.nan_skips += sum(skipped for _, skipped in results)
        return {name: metrics for name, (metrics, _) in zip(work, results)}

    def _job(self, pol: Policy, samples: list[Sample]) -> UpdateJob:
        max_len = max(self.team.agents[s.agent].max_completion_length for s in samples)
        n = self.cfg.train.num_mini_batches
        if len(samples) < n and pol.name not in self._warned_few_samples:
            # the config allows n (teamrl.config.rules), but this step had fewer: an early
            # stop, DAPO's filter, episodes that ended early. Said once per policy.
            self._warned_few_samples.add(pol.name)
            warnings.warn(
                f"train.num_mini_batches={n}, but policy {pol.name!r} had {len(samples)} "
                f"samples at step {self.step + 1}: it made {len(samples)} optimizer steps per "
                f"pass, not {n} (said once per policy)",
                stacklevel=2,
            )
        return UpdateJob(pol, samples, max_len)

    # --- one step -----------------------------------------------------------------------------

    def rollout(self, examples, greedy: bool = False, single_path: bool = False) -> RolloutResult:
        """The recipe's rollout: joint tree (MAGRPO), agent-turn tree, or independent episodes.

        ``single_path`` (evaluation): one sample per node and no reward-based early stop, so
        no branch is ever chosen by its reward (that would be an oracle at test time).
        """
        return self.recipe.rollout(
            self.team,
            self.task.make_env,
            examples,
            self.cfg,
            step=self.step,
            greedy=greedy,
            single_path=single_path,
        )

    def train_step(self) -> dict[str, float]:
        cfg = self.cfg
        t0 = time.perf_counter()
        batch = self.execution.next_batch(self.step)
        result = batch.result
        t_rollout = time.perf_counter() - t0
        metrics: dict[str, float] = {"step": self.step + 1}
        metrics.update(result.metrics)
        metrics.update(batch.stats)  # asynchronous: staleness, waits
        assigned = self.credit.assign(
            result, lambda: self.rollout(self.data.next(cfg.train.prompts_per_step))
        )
        metrics.update(assigned.metrics)
        train_samples = assigned.samples
        t1 = time.perf_counter()
        self._updating = True
        # a policy with no samples this step skips its update, not its schedule
        work = {n: [s for s in train_samples if s.policy == n] for n in self.team.policies}
        updated = self.update_team({n: mine for n, mine in work.items() if mine})
        for name, pol in self.team.policies.items():
            for k, v in updated.get(name, {}).items():
                metrics[f"{k}/{name}"] = v
            metrics[f"lr/{name}"] = pol.optimizer.param_groups[0]["lr"]  # the LR it trained with
            # LR(step) depends on the trainer step alone: stepped here once per trainer step,
            # even when the policy had no samples or every update was skipped (NaN). torch
            # warns about that order once; here it is intended.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step")
                pol.scheduler.step()
        metrics.update(self.credit.fit(self.step))  # a critic fits on features from before
        t_update = time.perf_counter() - t1
        self.step += 1
        self._data_state = batch.data_state
        self._updating = False
        self.execution.weights_updated(self.step)  # the sampler may take them now
        gen_s = result.stats["time/generate"]
        # seconds the fast path spent compiling since the last step (inside time/generate; the
        # first steps of a run, and any new shape bucket later)
        compiled = fast_decode.compile_seconds(p.model for p in self.team.policies.values())
        metrics["time/compile"], self._compile_seen = compiled - self._compile_seen, compiled
        metrics.update(
            {
                "time/rollout": t_rollout,
                "time/generate": gen_s,
                "time/reward": result.stats["time/reward"],
                "time/update": t_update,
                "time/step": time.perf_counter() - t0,
                "tokens_per_second": result.stats["tokens/generated"] / max(gen_s, 1e-9),
                "nan_skips": float(self.nan_skips),
                "epoch": float(self.data.epoch),
            }
        )
        # what the step held, measured (the preflight's estimate cannot see an app's calls)
        device = torch.device(self.ctx.device)
        metrics.update({f"memory/{k}": v for k, v in measured_memory(device).items()})
        if self.logger is not None:  # the first examples' whole groups (teamrl report), which
            # the loop writes with the step's metrics row
            self._step_samples = sample_rows(
                result.samples, self.step, cfg.log.num_groups_to_log, self.team.decode
            )
        return metrics

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Greedy single-path episodes on the held-out split (never the test split).

        A task with no eval split is evaluated on its first training examples instead: never
        silently, but with a warning (once) and ``eval/on_train_split = 1`` in the metrics.
        """
        on_train = not self.task.eval
        split = self.task.train if on_train else self.task.eval
        n = min(self.cfg.eval.num_examples, len(split))
        if on_train and not self._warned_eval_on_train:
            self._warned_eval_on_train = True
            warnings.warn(
                f"task {self.task.name!r} has no eval split: evaluation uses its first {n} "
                "TRAINING examples, so eval/* scores are not held-out (eval/on_train_split=1). "
                "Give the Task an eval split for a held-out score.",
                stacklevel=2,
            )
        examples = [(i, split[i]) for i in range(n)]
        # eval never shifts the training RNG streams (CPU and every CUDA device)
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with self.execution.paused(), torch.random.fork_rng(devices=cuda):
            result = self.rollout(examples, greedy=self.cfg.eval.greedy, single_path=True)
        self.last_eval = result
        m = result.metrics
        keep = ("reward", "completion", "success", "turns")
        out = {f"eval/{k}": v for k, v in m.items() if k.startswith(keep)}
        out["eval/on_train_split"] = float(on_train)
        return out

    def _evaluate_with_rows(self) -> tuple[dict[str, float], list[dict]]:
        """``evaluate`` and its every held-out episode as eval_samples.jsonl rows (teamrl
        report's before/after), which the loop writes with the step's metrics row."""
        out = self.evaluate()
        ev = self.last_eval
        assert ev is not None
        return out, sample_rows(ev.samples, self.step, None, self.team.decode, ev.episodes)

    # --- the loop -----------------------------------------------------------------------------

    def train(self, resume: bool = False) -> list[dict]:
        """Train to ``train.max_steps``. The run folder is locked for the duration; SIGTERM or
        Ctrl-C ends the current step, writes a checkpoint and raises ``TrainingInterrupted``.
        Anything else that ends a step writes the checkpoint of the last completed step and
        raises a one-line error naming the step, the cause and the resume command (``_net``).
        A finished call prints one closing line on stdout (the main process): the step
        reached, the run folder and its last checkpoint."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        lock = RunLock(self.run_dir).acquire() if self.ctx.is_main else None
        try:
            with StopRequest() as stop:
                history = self._train(resume, stop)
        finally:
            if lock is not None:
                lock.release()
        if self.ctx.is_main:  # stdout: stderr's "teamrl: " lines are the events tests count
            done = checkpoints.checkpoint_folders(self.run_dir)
            print(
                f"trained to step {self.step} of {self.cfg.train.max_steps} ({len(history)} "
                f"this call); run folder: {self.run_dir}; last checkpoint: "
                f"{done[-1] if done else 'none'}",
                flush=True,
            )
        return history

    def _train(self, resume: bool, stop: StopRequest) -> list[dict]:
        cfg = self.cfg
        if not resume and (self.run_dir / "metrics.jsonl").exists():
            if not cfg.log.overwrite:
                raise FileExistsError(
                    f"{self.run_dir} already holds a run: pass --resume to continue it, "
                    "log.overwrite=true to start afresh, or another run_name"
                )
            shutil.rmtree(self.run_dir / "checkpoints", ignore_errors=True)
        if self.ctx.is_main:
            remove_orphans(self.run_dir / "checkpoints")
        if resume:  # the newest checkpoint that matches its manifest
            ckpt = checkpoints.resume_checkpoint(self.run_dir, missing_ok=True)
            if ckpt is None:  # stopped before its first checkpoint (a preempted job resumes)
                resume = False  # from step 0: the logger drops every line the lost steps wrote
                logged = (self.run_dir / "metrics.jsonl").exists()
                if self.ctx.is_main:
                    log_line(
                        f"--resume: no checkpoint in {self.run_dir / 'checkpoints'} yet: "
                        "starting from step 0"
                        + ("; clearing the metrics of the steps it lost" if logged else "")
                    )
            else:
                self.load_checkpoint(ckpt)
        if self.ctx.is_main:
            dump_config(cfg, self.run_dir / "config.yaml")
            write_origin(self.run_dir, self._origin())
        self.logger = RunLogger(
            self.run_dir,
            cfg.log.tensorboard,
            cfg.log.wandb,
            cfg.log.wandb_project,
            cfg.run_name,
            to_dict(cfg),
            ctx=self.ctx,
        )
        self.logger.truncate_after(self.step if resume else -1)
        if resume and self._unwritten:  # what a failed step could not log: its checkpoint kept it
            self.logger.write_step(**self._unwritten)
            self._unwritten = None
        watch = LearningWatch(cfg, self.logger)  # warns when a run is not learning
        history = []
        bar = None
        if cfg.log.progress_bar:
            from tqdm.auto import tqdm

            bar = tqdm(
                total=cfg.train.max_steps, initial=self.step, desc=cfg.run_name, dynamic_ncols=True
            )
        try:
            if cfg.eval.eval_steps and self.step == 0:
                with self._net(self._failed_eval, None, history):
                    scores, episodes = self._evaluate_with_rows()
                    self.logger.write_step({"step": 0, **scores}, evaluation=episodes)
            while self.step < cfg.train.max_steps:
                # where the step starts: what a step that fails before its update goes back to
                start = {
                    "step": self.step,
                    "rng": rng_state(),
                    "data": self._data_state or self.data.state(),
                }
                self._updating = False
                self._step_samples = []
                with self._net(self._failed_step, start):
                    metrics = self.train_step()
                episodes: list[dict] = []
                if cfg.eval.eval_steps and self.step % cfg.eval.eval_steps == 0:
                    with self._net(self._failed_eval, metrics, history):
                        scores, episodes = self._evaluate_with_rows()
                    metrics.update(scores)
                with self._net(self._failed_step, start):  # the step is applied: a failure
                    # here (a full disk, no descriptor left) checkpoints the step itself
                    found = watch.note(metrics)
                    self.logger.write_step(metrics, self._step_samples, episodes)
                    watch.warn(found)
                history.append(metrics)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(
                        # the team reward (AT-GRPO's return counts it once per node)
                        reward=f"{metrics[team_reward_key(metrics)]:.3f}",
                        s_per_step=f"{metrics['time/step']:.1f}",
                        tok_s=f"{metrics['tokens_per_second']:.0f}",
                    )
                save_every = cfg.log.save_steps
                saved = None
                stopping = stop.signum is not None and self.step < cfg.train.max_steps
                with self._net(self._failed_save):
                    if (save_every and self.step % save_every == 0) or (
                        self.step == cfg.train.max_steps
                    ):
                        saved = self.save_checkpoint()
                    if stopping:  # at a step boundary: nothing is half applied
                        saved = saved or self.save_checkpoint()
                if stopping:
                    raise TrainingInterrupted(self.step, saved, stop.signum, self.run_dir)
        finally:
            self.execution.stop()
            if bar is not None:
                bar.close()
            self.logger.close()
        return history

    @contextmanager
    def _net(self, handler: Callable[..., BaseException], *args) -> Iterator[None]:
        """The net under every part of a step: whatever escapes the block (any
        ``BaseException``: an error of the user's code, ``sys.exit`` or ``KeyboardInterrupt``
        raised by it, a log line that cannot be written) goes to ``handler(err, *args)``, which
        writes the checkpoint of the last completed step and returns the exception to raise: a
        teamrl one-line error itself, its message now the whole line, else a ``StepFailed``
        from it. Two pass through: the run's second signal (abort at once) and a dead Ray
        worker (its state is gone; the command line names the last checkpoint)."""
        try:
            yield
        except (SecondSignal, WorkerDiedError):
            raise
        except BaseException as err:
            failure = handler(err, *args)
            if failure is err:
                raise
            raise failure from err

    def _failed_step(self, err: BaseException, start: dict) -> BaseException:
        """A step that failed; what is written depends on how far it got.

        Before its update (the rollout: a reward, an env's step, reset or copy, a task's
        ``make_env``, a prompt function) the weights, optimizers, schedulers, credit and
        counters are still those of the last completed step; only the RNG streams (generation
        drew from them, and the user's code may have) and the data position moved. Both go back
        to where the step began (``start``), so the checkpoint is exactly the one an
        uninterrupted run writes after that step, and ``--resume`` with a fixed reward continues
        as a run that always had it.

        After its update (writing its log lines: a full disk, no descriptor left) the step is
        complete: the RNG streams and data position are those after it, so its own checkpoint
        is written, keeping the lines not written (``RunLogger.unwritten``) for the resume.

        During its update the weights are those of no step: nothing is written, and the line
        names the last checkpoint there is.
        """
        cause = _cause(err)
        if self._updating:
            last = checkpoints.latest_checkpoint(self.run_dir)
            return _with_message(
                err, failed_update_message(cause, self.step + 1, last, self.run_dir)
            )
        if self.step > start["step"]:
            saved = self._save_after_failure()
            lines = self.logger.unwritten_lines() if self.logger is not None else 0
            message = failed_after_update_message(cause, self.step, saved, lines, self.run_dir)
            return _with_message(err, message)
        self.execution.stop()  # an asynchronous generator ends, its batches drawn ahead dropped
        set_rng_state(start["rng"])
        self.data.load(start["data"])
        self._data_state = start["data"]
        saved = self._save_after_failure() if self.step > 0 else None
        return _with_message(err, failed_step_message(cause, self.step + 1, saved, self.run_dir))

    def _failed_eval(
        self, err: BaseException, metrics: dict | None, history: list[dict]
    ) -> BaseException:
        """An evaluation that failed, after a step that completed: the step is kept (its metrics
        logged without eval scores, its checkpoint written). Evaluation draws from forked RNG
        streams and no data position, so the checkpoint is the one an uninterrupted run writes
        after that step. ``metrics`` None: the evaluation before step 1, nothing to write."""
        cause = _cause(err)
        if metrics is None:
            return _with_message(err, failed_eval_message(cause, 0, None, self.run_dir))
        assert self.logger is not None
        try:
            self.logger.write_step(metrics, self._step_samples)
            history.append(metrics)
        except RunError:  # the lines it could not write go into the checkpoint (unwritten)
            pass
        saved = self._save_after_failure()
        return _with_message(err, failed_eval_message(cause, self.step, saved, self.run_dir))

    def _failed_save(self, err: BaseException) -> BaseException:
        """A checkpoint that could not be written after its step completed (a full disk, no
        descriptor left): the temp folder is gone, the step's log lines are written, and a
        resume goes back to the last checkpoint there is."""
        last = checkpoints.latest_checkpoint(self.run_dir)
        return _with_message(err, failed_save_message(_cause(err), self.step, last, self.run_dir))

    def _save_after_failure(self) -> Path | str:
        """The checkpoint of the current step (written already at a save step or by the resume
        that loaded it, else now), or why it could not be written and the last one there is."""
        saved = self.run_dir / "checkpoints" / f"step-{self.step}"
        if self._saved_step == self.step and saved.is_dir():
            return saved
        try:
            return self.save_checkpoint()
        except Exception as err:  # a full disk, no descriptor left: said in the same line
            return unsaved(err, checkpoints.latest_checkpoint(self.run_dir))

    def _origin(self) -> RunOrigin:
        """What the run folder records of where this run came from (``run.json``)."""
        imports = task_imports(self.cfg.env.name)
        return origin_of(self.cfg.env.name, self._task_registered, imports, self._task_file)

    # --- checkpoints --------------------------------------------------------------------------

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step-N`` atomically (see ``teamrl.run.checkpoints``)."""
        # the position after the last consumed batch (an asynchronous generator draws ahead)
        data = self._data_state or self.data.state()
        state = {"step": self.step, "data": data, "nan_skips": self.nan_skips}
        if self.logger is not None:
            if self.logger.unwritten:  # a failed step's log lines: the resume writes them
                state["unwritten"] = self.logger.unwritten
            self.logger.sync()  # no checkpoint is ahead of the metrics it follows
        credit_state = self.credit.state()
        with self.execution.paused():  # the RNG states it saves are between two rollouts
            path = checkpoints.save_checkpoint(
                self.run_dir, self.cfg, self.team, state, self.ctx, critics=credit_state
            )
        self._saved_step = self.step
        return path

    def load_checkpoint(self, path: str | Path) -> None:
        state = checkpoints.load_checkpoint(path, self.cfg, self.team)
        for pol in self.team.policies.values():  # the *current* config's LR schedule
            lr = agent_setting(self.cfg, pol.agents, "learning_rate", self.cfg.train.learning_rate)
            self.execution.apply_schedule(pol, lr, self.cfg)
        self.credit.load(Path(path))
        self.step = state["step"]
        self.nan_skips = state["nan_skips"]
        self.data.load(state["data"])
        self._data_state = None
        self._saved_step = self.step
        self._unwritten = state.get("unwritten")

    def export(self, out_dir: str | Path) -> Path:
        """A team folder (as ``teamrl export``): one folder of standard weights per policy (a
        PEFT adapter or a save_pretrained model, with the tokenizer) and ``team.yaml``."""
        if self.ctx.is_main:
            credit_state = self.credit.state()
            write_team_folder(
                Path(out_dir), self.cfg, self.team.systems, self.team, critics=credit_state
            )
        return Path(out_dir)


def _source_file(make_env: Callable) -> str | None:
    """The file that defined a Task object's env factory (None for a builtin or C callable)."""
    try:
        return inspect.getsourcefile(make_env)
    except TypeError:
        return None


def _cause(err: BaseException) -> str:
    """What ended a step, on one line: a teamrl error's own message (it names the example,
    turn, agents and the user's frame), else the exception and the user's frame it came from
    (``SystemExit(0) at tasks.py:12 in reward``)."""
    if isinstance(err, UserCodeError | ConfigError):
        return str(err).replace("\r", " ").replace("\n", " ")
    return user_frame(err)


def _with_message(err: BaseException, message: str) -> BaseException:
    """``err`` with ``message`` if it is one of teamrl's one-line errors (the Python API raises
    the same exception the user's code caused), else a ``StepFailed`` saying ``message``."""
    if isinstance(err, UserCodeError | ConfigError):
        err.args = (message,)
        return err
    return StepFailed(message)
