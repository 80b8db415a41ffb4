"""The server's side of a stream: MatAnyone2's state for one element, held between its requests.

A stream (one Triton sequence, one `matanyone` element) tracks up to eight people at one working
size. Each request carries the frame at that size (or none: the last frame again) and one operation
per person slot; the frame is encoded once for all of them, as the element's in-process engine does
(`MatAnyone2Engine`), and every slot's step runs `tools/matanyone2/glue.py`, the executable spec the
engine's Swift glue was ported from. The element keeps everything that is not the network's own
state: seeding (segmenter or mask), the quality watch, the union of people, resampling to the frame.

This module knows nothing of Triton: `model.py` (the Triton Python backend model) decodes requests
into `Request` and encodes `Result`s; tests call it directly.

The wire protocol (version 1) is described in PROTOCOL.md beside this file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from glue import MatAnyone2Glue, pad_amounts, pad_chw

PROTOCOL = 1

# Operations on a person slot (the OPS input).
KEEP, STEP, START, STOP = 0, 1, 2, 3
MAX_SLOTS = 8
# The smallest padded side the element's engine uses (two grid cells), and the largest this server
# accepts (the export's dynamic range).
MIN_PADDED, MAX_SIDE = 32, 4096
# The models timed in TIMING, in the element's order (FrameReport.modelMs).
MODEL_ORDER = ('encoder', 'uncert', 'readout', 'decoder', 'maskencoder', 'memframe')


class ProtocolError(ValueError):
    """A request this server cannot act on: the reply is an error naming what was wrong."""


class StateLost(ProtocolError):
    """A request that continues a stream this server holds no state for (it restarted, or the
    stream was idle too long): the element starts the stream over."""

    PREFIX = 'matanyone2-state-lost: '

    def __init__(self, detail: str):
        super().__init__(self.PREFIX + detail)


@dataclass
class Settings:
    """MatAnyone2's tuning for a stream, sent by the element with the sequence's first request."""
    mem_every: int = 5
    max_mem_frames: int = 5
    top_k: int = 30
    stagger_updates: int = 5
    warmup: int = 10

    @staticmethod
    def from_parameters(parameters: dict) -> 'Settings':
        settings = Settings()
        for name in ('mem_every', 'max_mem_frames', 'top_k', 'stagger_updates', 'warmup'):
            if name in parameters:
                value = parameters[name]
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ProtocolError(f'parameter {name} must be an integer, not {value!r}')
                setattr(settings, name, value)
        minimum = {'mem_every': 1, 'max_mem_frames': 1, 'top_k': 1, 'stagger_updates': 0, 'warmup': 0}
        for name, lowest in minimum.items():
            value = getattr(settings, name)
            if not lowest <= value <= 100_000:
                raise ProtocolError(f'parameter {name}={value} out of range ({lowest} to 100000)')
        return settings


@dataclass
class Request:
    """One request of a stream, decoded. `frame`: float32 [3, H, W] RGB in [0, 1], or None for the
    last frame again; `ops`: one operation per slot; `seeds`: uint8 [S, H, W], one per START in
    slot order; `warmup`: warm-up passes for this request's STARTs (None: the stream's)."""
    ops: np.ndarray
    frame: np.ndarray | None = None
    seeds: np.ndarray | None = None
    warmup: int | None = None


@dataclass
class Result:
    alpha: np.ndarray        # uint8 [P, H, W], round(alpha * 255); zeros for slots not tracking
    uncertainty: np.ndarray  # float32 [P, h, w], each slot's uncert_prob of its last ordinary frame
    state: np.ndarray        # int32 [P, 2]: tracking (0/1), memory frames
    timing: np.ndarray       # float32 [8]: compute ms, then MODEL_ORDER ms, then the glue's own ms


@dataclass
class Stream:
    """One element's state: its people at one working size, and the last frame's encoding."""
    models: object
    settings: Settings
    slots: int
    size: tuple[int, int]
    tracks: list = field(default_factory=list)
    tracking: list = field(default_factory=list)
    uncertainty: list = field(default_factory=list)
    encoding: dict | None = None
    last_used: float = 0.0

    def __post_init__(self):
        height, width = self.size
        if not (1 <= self.slots <= MAX_SLOTS):
            raise ProtocolError(f'{self.slots} person slots; 1 to {MAX_SLOTS} are served')
        if not (1 <= height <= MAX_SIDE and 1 <= width <= MAX_SIDE):
            raise ProtocolError(f'working size {width}x{height} outside 1 to {MAX_SIDE} a side')
        self.pads = pad_amounts(height, width, minimum=MIN_PADDED)
        grid = ((height + self.pads[0] + self.pads[1]) // 16, (width + self.pads[2] + self.pads[3]) // 16)
        s = self.settings
        self.tracks = [MatAnyone2Glue(None, models=self.models, warmup=s.warmup, top_k=s.top_k, mem_every=s.mem_every,
                                      max_mem_frames=s.max_mem_frames, stagger_updates=s.stagger_updates)
                       for _ in range(self.slots)]
        self.tracking = [False] * self.slots
        self.uncertainty = [np.zeros(grid, np.float32) for _ in range(self.slots)]
        self.last_used = time.monotonic()

    def handle(self, request: Request) -> Result:
        started = time.perf_counter()
        seconds = dict(self.models.seconds)
        ops = request.ops
        if ops.ndim != 1 or ops.shape[0] != self.slots:
            raise ProtocolError(f'OPS has shape {list(ops.shape)}; this stream has {self.slots} person slots')
        starts = int((ops == START).sum())
        seeds = request.seeds
        if starts:
            if seeds is None or seeds.shape != (starts,) + self.size:
                got = 'none' if seeds is None else list(seeds.shape)
                raise ProtocolError(f'SEEDS has shape {got}; {starts} START(s) at {self.size[1]}x{self.size[0]} '
                                    f'need [{starts}, {self.size[0]}, {self.size[1]}]')
        elif seeds is not None:
            raise ProtocolError('SEEDS given without a START')
        for slot, op in enumerate(ops):
            if op not in (KEEP, STEP, START, STOP):
                raise ProtocolError(f'OPS[{slot}]={int(op)} is no operation (0 keep, 1 step, 2 start, 3 stop)')
            if op == STEP and not self.tracking[slot]:
                raise ProtocolError(f'OPS[{slot}] steps a person slot that is not tracking (start it first)')
        if request.frame is not None:
            if request.frame.shape != (3,) + self.size:
                raise ProtocolError(f'FRAME has shape {list(request.frame.shape)}; this stream works at '
                                    f'[3, {self.size[0]}, {self.size[1]}] (a new size is a new sequence)')
            image = pad_chw(np.ascontiguousarray(request.frame, np.float32), self.pads)[None]
            self.encoding = self.models.run('encoder', image=image)
        elif self.encoding is None and bool(np.isin(ops, (STEP, START)).any()):
            raise ProtocolError('no FRAME, and no earlier frame to work on')

        next_seed = 0
        for slot, op in enumerate(ops):
            track = self.tracks[slot]
            if op == STEP:
                track.step_encoded(self.encoding)
                self.uncertainty[slot] = track.last_uncertainty[0, 0]
            elif op == START:
                seed = seeds[next_seed].astype(np.float32) / np.float32(255.0)
                next_seed += 1
                track.start_encoded(self.encoding, seed, self.size, self.pads, warmup=request.warmup)
                self.tracking[slot] = True
            elif op == STOP:
                track.reset()
                self.tracking[slot] = False

        alpha = np.zeros((self.slots,) + self.size, np.uint8)
        state = np.zeros((self.slots, 2), np.int32)
        for slot, track in enumerate(self.tracks):
            if self.tracking[slot]:
                unpadded = track._output(track.last_alpha)
                alpha[slot] = np.rint(np.clip(unpadded, 0, 1) * np.float32(255.0)).astype(np.uint8)
                state[slot] = (1, track.memory.frames)
        total_ms = (time.perf_counter() - started) * 1000
        model_ms = [(self.models.seconds.get(name, 0.0) - seconds.get(name, 0.0)) * 1000 for name in MODEL_ORDER]
        timing = np.array([total_ms] + model_ms + [max(total_ms - sum(model_ms), 0.0)], np.float32)
        self.last_used = time.monotonic()
        return Result(alpha=alpha, uncertainty=np.stack(self.uncertainty).astype(np.float32), state=state, timing=timing)


class Streams:
    """Every stream this model instance serves, by Triton sequence (correlation) id."""

    def __init__(self, models, max_streams: int = 64, idle_seconds: float = 60.0):
        self.models = models
        self.max_streams = max_streams
        self.idle_seconds = idle_seconds
        self.streams: dict[int | str, Stream] = {}

    def handle(self, sequence, start: bool, end: bool, parameters: dict, request: Request,
               size: tuple[int, int] | None) -> Result:
        self.evict_idle()
        if start:
            if parameters.get('protocol', PROTOCOL) != PROTOCOL:
                raise ProtocolError(f'this server speaks protocol {PROTOCOL}, the client {parameters.get("protocol")}')
            if size is None:
                raise ProtocolError('the first request of a stream carries its FRAME (it sets the working size)')
            self.streams.pop(sequence, None)
            if len(self.streams) >= self.max_streams:
                raise ProtocolError(f'this server instance already serves {self.max_streams} streams (max_streams)')
            self.streams[sequence] = Stream(self.models, Settings.from_parameters(parameters), int(request.ops.shape[0]), size)
        stream = self.streams.get(sequence)
        if stream is None:
            raise StateLost(f'no state for stream {sequence} (the server restarted or the stream was idle over '
                            f'{self.idle_seconds:.0f} s): start it again')
        try:
            return stream.handle(request)
        finally:
            if end:
                self.streams.pop(sequence, None)

    def evict_idle(self):
        """Streams silent for longer than the idle time: their element is gone (Triton's sequence
        batcher forgets them too, after max_sequence_idle_microseconds)."""
        now = time.monotonic()
        for sequence in [s for s, stream in self.streams.items() if now - stream.last_used > self.idle_seconds]:
            del self.streams[sequence]
