"""Retrieve-then-steer: a VLA policy whose flow sampler starts from a success-memory prior.

At each decision the memory is queried with the current key (the normalized state) and the actions
executed so far; when the consistent elite set is confident enough, sampling starts at
`tau0 = tau_max * g(confidence)` from `(1 - tau0) * eps + tau0 * prior` and the frozen policy
finishes the path. Below the confidence floor, or with an empty memory, the policy runs unchanged
(bit-identical to running without memory for the same seed). After each episode the loop reports
the verified outcome: successes are stored, failures are credited to the entries that steered.
Opt-in (``recall_seed``), an episode starts its noise from a stored success's seed (`reset`).

Any ``steerable`` policy can be steered (`embodia.policies.base.Policy`): embodia's own checkpoints
(`VLAPolicy`) and a flow policy served from another environment that announces steering
(`embodia.policies.ws_policy.WebsocketPolicy`, e.g. the LeRobot side). It gives ``steer_chunk``,
``body_norms()``, ``horizon``, ``steps``, ``blend`` and ``memory_settings``; the ``select`` and
``noise-recall`` ablations also need the checkpoint in this process.

>>> steered = SteeredPolicy(VLAPolicy.from_pretrained(path).bind(emb), memory, namespace="pusher/twogap")  # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from embodia.memory import MemoryConfig, SuccessMemory, stable_hash
from embodia.policies.base import Policy
from embodia.policies.robot.vla import MEMORY_KEYS
from embodia.shared.noise import draw_noise

KEY_ENCODER = "normalized-state/v1"       # the default key: the normalized state
OFFSETS_ENCODER = "point-offsets/v1"      # opt-in (memory.json "key": "offsets"): see OffsetKey
KEYS = dict(zip(MEMORY_KEYS, (KEY_ENCODER, OFFSETS_ENCODER), strict=True))


class OffsetKey:
    """A key that is the same wherever the scene sits: for the points in the state (channels
    ``<thing>_x``, ``_y`` [, ``_z``]), the offset between every two points of one size, each point's
    motion since the previous step (``prev_<thing>_*`` channels, where the body has them), then every
    other channel normalized. Offsets are in units of ``scale`` (body units: 5 cm for a metre-based
    arm), motions in ``scale / 10``; a point at exactly 0 (an absent object's padding) gives zero
    offsets. Measured on MT50 under the protocol (docs/benchmarks/metaworld.md, "Memory on vs off on MT50"):
    +0.005 over the policy alone on eight fresh streams (paired 95% [-0.001, +0.011]), where the state
    key gave +0.002 on one.

    >>> from embodia.devices.embodiment import Channel, Embodiment
    >>> emb = Embodiment(name="b", kind="arm", hz=10.0, actions=(Channel("dx", -1, 1),),
    ...                  state=tuple(Channel(n, -1, 1) for n in ("hand_x", "hand_y", "obj_x", "obj_y", "grip")))
    >>> k = OffsetKey(emb, None)
    >>> k.dim, k([0.1, 0.2, 0.3, 0.2, 0.5]).tolist() == k([0.4, -0.1, 0.6, -0.1, 0.5]).tolist()
    (7, True)
    """

    def __init__(self, embodiment, state_norm, scale: float = 0.05):
        names = [c.name for c in embodiment.state]
        axes: dict[str, dict[str, int]] = {}
        for i, n in enumerate(names):
            head, _, axis = n.rpartition("_")
            if head and axis in ("x", "y", "z") and not head.startswith("prev_"):
                axes.setdefault(head, {})[axis] = i
        self.points = {p: [a[x] for x in sorted(a)] for p, a in axes.items() if len(a) >= 2}
        self.prev = {p: [names.index(f"prev_{names[i]}") for i in ix] for p, ix in self.points.items()
                     if all(f"prev_{names[i]}" in names for i in ix)}
        used = {i for ix in self.points.values() for i in ix}
        self.other = [i for i, n in enumerate(names) if i not in used and not n.startswith("prev_")]
        names_sorted = sorted(self.points)
        self.pairs = [(a, b) for j, a in enumerate(names_sorted) for b in names_sorted[j + 1:]
                      if len(self.points[a]) == len(self.points[b])]
        self.norm, self.scale = state_norm, float(scale)
        self.dim = (sum(len(self.points[a]) for a, _ in self.pairs) + sum(len(ix) for ix in self.points.values())
                    + len(self.other))

    def __call__(self, state) -> np.ndarray:
        s = np.asarray(state, np.float64)
        pts = {p: s[..., ix] for p, ix in self.points.items()}
        live = {p: np.any(v != 0, axis=-1, keepdims=True) for p, v in pts.items()}
        feats = [(pts[a] - pts[b]) / self.scale * (live[a] & live[b]) for a, b in self.pairs]
        for p in sorted(self.points):
            feats.append((pts[p] - s[..., self.prev[p]]) / (self.scale / 10) if p in self.prev
                         else np.zeros_like(pts[p]))
        rest = s[..., self.other]
        if self.norm is not None and self.other:
            rest = np.asarray(self.norm.normalize(s), np.float64)[..., self.other]
        feats.append(rest)
        return np.concatenate(feats, axis=-1).astype(np.float32)


def memory_for(policy: Policy, config=None) -> SuccessMemory:
    """An empty memory whose keys and chunks match this policy's embodiment. Without ``config`` it
    takes the checkpoint's own memory settings (``memory.json`` beside its weights), else the
    defaults; the key is the checkpoint's (``"key"`` there: ``state``, the default, or ``offsets``)."""
    emb = policy.embodiment
    settings = dict(policy.memory_settings)
    kind = settings.pop("key", "state")
    if config is None:
        config = MemoryConfig(**settings)
    dim = OffsetKey(emb, None).dim if kind == "offsets" else emb.state_dim
    return SuccessMemory(config, key_dim=dim, horizon=policy.horizon,
                         action_dim=emb.action_dim, hist_len=emb.exec_horizon,
                         encoder_id=KEYS[kind], normalizer_hash=normalizer_hash(policy))


def normalizer_hash(policy: Policy) -> str:
    n = policy.body_norms()
    return stable_hash({"state": n["state"].to_dict(), "action": n["action"].to_dict()})


class SteeredPolicy(Policy):
    step_images = False     # after_step keeps the state and the action; decisions read their own frames

    def __init__(self, policy: Policy, memory: SuccessMemory, *, namespace: str, learn: bool = True):
        if not policy.steerable:
            raise ValueError(f"{type(policy).__name__} cannot be steered by a success memory (a flow policy "
                             f"that announces steering can: embodia's checkpoints, lerobot:, remote: servers)")
        if not policy.steer_local and (memory.config.select or memory.config.recall_noise):
            raise ValueError("the select and noise-recall ablations need the checkpoint in this process; "
                             "a served policy is steered by seed recall and steering")
        self.policy, self.memory, self.namespace = policy, memory, namespace
        self.learn = learn        # store successes and credit failures (off: a frozen memory)
        self.autosave = None      # a folder: save the memory there after every episode (a kill loses one)
        emb = policy.embodiment
        norms = policy.body_norms()
        self._snorm, self._anorm = norms["state"], norms["action"]
        encoder = memory.encoder_id
        if encoder not in KEYS.values():
            raise ValueError(f"a memory keyed by {encoder!r}; this policy makes {sorted(KEYS.values())}")
        self._offsets = OffsetKey(emb, self._snorm) if encoder == OFFSETS_ENCODER else None
        self.episodes = memory.last_episode_id()   # a reopened memory: new episodes number on after it
        self.noise_bank: dict = {}   # (episode id, step) -> noise of a stored entry's decision (recall_noise)
        self.reset(None)

    @property
    def embodiment(self):
        return self.policy.embodiment

    @property
    def exec_horizon(self):      # the checkpoint's own decision rate, which steering keeps
        return self.policy.exec_horizon

    @property
    def ensemble(self):          # the checkpoint's temporal ensembling, which steered chunks go through too
        return self.policy.ensemble

    def reset(self, seed: int | None = None) -> None:
        """Start an episode. With ``recall_seed`` in the memory's config the policy's noise starts
        from a stored success's seed in this namespace (`SuccessMemory.recall_seed`), else from
        ``seed``; ``noise_seed`` says which."""
        recalled = self.memory.recall_seed(self.namespace) if self.memory.config.recall_seed else None
        self.noise_seed = recalled if recalled is not None else seed
        self.recalled_seed = recalled is not None
        self.policy.reset(self.noise_seed)
        self.states: list[np.ndarray] = []     # what the loop executed, in the body's units
        self.actions: list[np.ndarray] = []
        self.steered = 0
        self.decisions = 0
        self.noises: list = []       # (step, the noise this decision's flow started from), for recall_noise
        self.tau0s: list[float] = []
        self.instruction = ""

    def act(self, obs, instruction: str) -> np.ndarray:
        pol, emb = self.policy, self.policy.embodiment
        key = self.key(obs.state)
        hist = (np.asarray(self._anorm.normalize(np.stack(self.actions[-emb.exec_horizon:])), np.float32)
                if self.actions else np.zeros((0, emb.action_dim), np.float32))
        r = self.memory.query(self.namespace, key, hist, t=len(self.actions))
        guide = self.memory.guidance(r, steps=pol.steps)
        self.decisions += 1
        self.instruction = instruction
        if self.memory.config.recall_noise:
            return self._act_from_noise(obs, instruction, r, guide)
        if guide is None:
            return pol.act(obs, instruction)
        tau0, prior = guide
        self.steered += 1
        self.tau0s.append(float(tau0))
        if self.learn:
            self.memory.record_use(self.namespace, r)
        if self.memory.config.select:       # retrieve-then-select: the policy's own chunk nearest the prior
            chunks = pol.predict_candidates(obs, instruction, self.memory.config.select)
            gap = np.asarray(self._anorm.normalize(chunks), np.float32) - np.asarray(prior, np.float32)[None]
            return pol.blend(chunks[int(np.argmin(np.square(gap).sum(axis=(1, 2))))])
        # the memory (faiss, numpy) stays here; the policy moves the prior to its model (or its wire)
        return pol.blend(pol.steer_chunk(obs, instruction, prior, tau0))

    def _act_from_noise(self, obs, instruction: str, r, guide) -> np.ndarray:
        """``recall_noise``: the policy's own draw (the one plain sampling makes, so an unsteered
        decision is bit-identical), replaced where the memory would steer by the noise that began the
        best-weighted elite's chunk in its successful episode; the whole flow runs either way."""
        pol = self.policy
        _, _, amask, _ = pol.inputs(pol.embodiment, obs.state)
        eps = draw_noise(amask.shape, pol.generator, amask.device, amask.dtype)
        self.noises.append((len(self.actions), eps))
        x0 = eps
        if guide is not None:
            origin = self.memory.origins(self.namespace, [r.elite_ids[int(np.argmax(r.weights))]])[0]
            stored = self.noise_bank.get(origin)
            if stored is not None:
                x0 = stored.to(eps)
                self.steered += 1
                self.tau0s.append(0.0)
                if self.learn:
                    self.memory.record_use(self.namespace, r)
        return pol.blend(pol.predict_chunk(obs, instruction, x0=x0, tau0=0.0))

    # -- keys and chunks: the one encoding used to store and to query ------------------------------
    def key(self, state) -> np.ndarray:
        if self._offsets is not None:
            return self._offsets(state)
        return np.asarray(self._snorm.normalize(np.asarray(state)), np.float32)

    def remember(self, states, actions, episode_id: int = -1) -> int:
        """Store one verified successful episode (states [T, S], executed actions [T, D], body units)."""
        return self.memory.add_episode(self.namespace, self.key(states),
                                       np.asarray(self._anorm.normalize(np.asarray(actions)), np.float32),
                                       success=True, episode_id=episode_id, stride=self.embodiment.exec_horizon)

    # -- the loop reports every executed step and the verified outcome -----------------------------
    def after_step(self, obs, action) -> None:
        self.states.append(np.asarray(obs.state))
        self.actions.append(np.asarray(action))

    def set_executed(self, states, actions) -> None:
        """Replace what this episode executed (a remote client reports the steps that really ran)."""
        self.states, self.actions = list(states), list(actions)

    def end_episode(self, success: bool) -> None:
        self.episodes += 1
        if not self.learn:
            return
        self.memory.end_episode(bool(success), namespace=self.namespace)
        if self.memory.config.recall_seed:
            self.memory.credit_seed(self.namespace, 0 if self.noise_seed is None else self.noise_seed, success)
        if success and self.actions:
            self.remember(np.stack(self.states), np.stack(self.actions), self.episodes)
            if self.memory.config.recall_noise:
                self.noise_bank.update({(self.episodes, t): eps for t, eps in self.noises})
        if self.noise_bank:     # entries evicted, merged away or deleted by credit take their noises along
            alive = self.memory.stored_origins(self.namespace)
            self.noise_bank = {o: eps for o, eps in self.noise_bank.items() if o in alive}
        if self.autosave is not None:
            self.memory.save(self.autosave)

    def hold_episode(self, label: dict, final_obs) -> None:
        """An outcome nobody verified: with a memory folder (``autosave``), the episode is kept under
        its ``pending/`` for `embodia memory review` (keys and executed actions in the memory's
        units, the final frame, what steered it); it is not stored and steers nothing. Either way
        the entries that steered it are not credited with the next episode's outcome."""
        self.episodes += 1
        uses = self.memory.detach_uses()
        if not self.learn or self.autosave is None or not self.actions:
            return
        from embodia.memory import pending
        emb = self.embodiment
        states, actions = np.stack(self.states), np.stack(self.actions)
        img = final_obs.images[emb.cameras[0].name] if final_obs is not None and emb.cameras else None
        final_state = ({c.name: float(v) for c, v in zip(emb.state, np.asarray(final_obs.state).reshape(-1))}
                       if final_obs is not None else None)
        pending.hold(self.autosave, {"kind": "robot", "namespace": self.namespace, "label": label,
                                     "instruction": self.instruction,
                                     "episode_id": self.episodes, "stride": emb.exec_horizon, "uses": uses,
                                     "steps_n": len(actions), "final_state": final_state},
                     arrays={"keys": self.key(states),
                             "actions": np.asarray(self._anorm.normalize(actions), np.float32)},
                     frame=img)
        self.memory.save(self.autosave)

    def info(self) -> dict:
        return {"memory_steered": self.steered, "memory_decisions": self.decisions,
                "memory_mean_tau0": float(np.mean(self.tau0s)) if self.tau0s else 0.0}
