"""MatAnyone2 inference for one object with numpy + onnxruntime: the SPEC for the native port.

This file re-implements, step by step, what upstream's `InferenceCore.step()` (plus the seed-mask
preparation and warm-up of upstream's `inference_matanyone2.py`) does for a single object with the
default configuration, running the six stateless ONNX sub-networks that export.py writes. All state
lives here, in plain arrays; the ONNX models hold none. GLUE.md describes the same thing in prose.

Conventions
-----------
* B = 1 (one batch item), one object. CK = 64 (key dim), CV = 256 (value dim), Q = 16 (summaries).
* Full frame H x W, padded to Hp x Wp (multiples of 16). Stride-16 grid h = Hp/16, w = Wp/16,
  HW = h*w query/memory tokens per frame. A token index is p = y*w + x (row-major).
* Every array is float32 and C-contiguous ("row-major"); shapes are given as [a, b, ...].
* `t` is upstream's `curr_ti`: 0 for the first frame (and during warm-up), +1 per frame after.

Lifecycle
---------
    g = MatAnyone2Glue('models/')          # loads manifest.json + the six ONNX files
    alpha0 = g.start(frame0_rgb, mask_u8)  # seed step + (warmup + 1) first-frame passes
    alpha1 = g.step(frame1_rgb)            # ordinary frames (memory frames every mem_every)
    ...
Frames: uint8 RGB [H, W, 3] (divided by 255 here) or float32 RGB [H, W, 3] in [0, 1].
Mask: uint8 [H, W] (255 = the object), exactly as upstream reads a PNG (`convert('L')`).
Output: alpha float32 [H, W] in [0, 1].
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

MODEL_NAMES = ('encoder', 'uncert', 'readout', 'decoder', 'maskencoder', 'memframe')


# ============================================================================================
# ONNX models

class Models:
    """One onnxruntime session per sub-network; `run(name, **inputs)` -> dict of outputs."""

    def __init__(self, model_dir: str | Path, intra_op_threads: int = 0, providers: dict | None = None):
        # `providers`: per model name, onnxruntime's providers list (default: the CPU provider)
        os.environ.setdefault('ORT_DISABLE_TELEMETRY', '1')  # before the library first loads
        import onnxruntime as ort
        self.dir = Path(model_dir)
        self.manifest = json.loads((self.dir / 'manifest.json').read_text())
        if self.manifest.get('format') != 1 or self.manifest.get('engine') != 'matanyone2':
            raise ValueError(f'{self.dir}: not a matanyone2 model set (format 1)')
        opts = ort.SessionOptions()
        # six sessions run one after another: threads that spin between runs only steal cores
        opts.add_session_config_entry('session.intra_op.allow_spinning', '0')
        opts.add_session_config_entry('session.inter_op.allow_spinning', '0')
        opts.intra_op_num_threads = intra_op_threads
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.sessions = {}
        self.outputs = {}
        for name in MODEL_NAMES:
            info = self.manifest['models'][name]
            sess = ort.InferenceSession(str(self.dir / info['file']), opts,
                                        providers=(providers or {}).get(name, ['CPUExecutionProvider']))
            self.sessions[name] = sess
            self.outputs[name] = [o['name'] for o in info['outputs']]
        self.seconds = defaultdict(float)  # accumulated run time per model
        self.calls = defaultdict(int)

    def run(self, name: str, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        t0 = time.perf_counter()
        outs = self.sessions[name].run(self.outputs[name], inputs)
        self.seconds[name] += time.perf_counter() - t0
        self.calls[name] += 1
        return dict(zip(self.outputs[name], outs))


# ============================================================================================
# padding (upstream utils/tensor_utils.py: pad_divide_by / unpad)

def pad_amounts(height: int, width: int, d: int = 16, minimum: int = 0) -> tuple[int, int, int, int]:
    """Centred zero padding to multiples of d (and at least `minimum`): (top, bottom, left, right);
    odd remainders put the extra row/column at the bottom/right."""
    new_h = max(minimum, height if height % d == 0 else height + d - height % d)
    new_w = max(minimum, width if width % d == 0 else width + d - width % d)
    top, left = (new_h - height) // 2, (new_w - width) // 2
    return top, new_h - height - top, left, new_w - width - left


def pad_chw(x: np.ndarray, pads) -> np.ndarray:
    """x [C, H, W] -> [C, Hp, Wp] with zeros (the image is padded BEFORE normalisation: padded
    pixels are black, i.e. -mean/std after the encoder's normalisation)."""
    top, bottom, left, right = pads
    return np.pad(x, ((0, 0), (top, bottom), (left, right)))


def unpad_hw(x: np.ndarray, pads) -> np.ndarray:
    top, bottom, left, right = pads
    return x[top:x.shape[0] - bottom, left:x.shape[1] - right]


# ============================================================================================
# seed mask preparation (upstream inference_matanyone2.py / InferenceCore.process_video, NOT
# InferenceCore.step): gen_dilate(mask, 10, 10) then gen_erosion(mask, 10, 10), OpenCV morphology.

def ellipse_kernel(k: int) -> np.ndarray:
    """cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k)) -> uint8 [k, k].

    r = c = k // 2; row i has ones in columns [max(c-dx,0), min(c+dx+1,k)) with dy = i - r and
    dx = round_half_even(c * sqrt((r*r - dy*dy) / (r*r))) when |dy| <= r, else the row is empty.
    For k = 10 (anchor at row 5, column 5):
        0000010000 / 0011111110 / 0111111111 / 1111111111 x5 / 0111111111 / 0011111110
    """
    r = c = k // 2
    out = np.zeros((k, k), np.uint8)
    inv_r2 = 1.0 / (r * r) if r else 0.0
    for i in range(k):
        dy = i - r
        if abs(dy) <= r:
            dx = int(np.rint(c * math.sqrt((r * r - dy * dy) * inv_r2)))
            j1, j2 = max(c - dx, 0), min(c + dx + 1, k)
            out[i, j1:j2] = 1
    return out


def _morph(src: np.ndarray, kernel: np.ndarray, op) -> np.ndarray:
    """cv2.dilate / cv2.erode (one iteration, anchor at the kernel centre (k//2, k//2), default
    border): dst[y, x] = op over kernel cells (i, j) set of src[y + i - k//2, x + j - k//2];
    cells outside the image are ignored."""
    kh, kw = kernel.shape
    ay, ax = kh // 2, kw // 2
    h, w = src.shape
    fill = -np.inf if op is np.maximum else np.inf
    padded = np.full((h + kh - 1, w + kw - 1), fill, np.float32)
    padded[ay:ay + h, ax:ax + w] = src
    out = np.full((h, w), fill, np.float32)
    for i in range(kh):
        for j in range(kw):
            if kernel[i, j]:
                op(out, padded[i:i + h, j:j + w], out=out)
    return out


def prepare_seed_mask(mask_u8: np.ndarray, dilate: int = 10, erode: int = 10) -> np.ndarray:
    """uint8 [H, W] mask -> float32 [H, W] alpha for the seed step.

    upstream: if dilate>0: m = 255 * dilate(m != 0, ellipse(dilate))
              if erode>0:  m = 255 * erode(m == 255, ellipse(erode))
              seed alpha = m / 255   (InferenceCore.step with matting=True)
    With both radii > 0 the result is binary (a morphological closing of `mask != 0`).
    """
    m = mask_u8.astype(np.float32)
    if dilate > 0:
        m = _morph((m != 0).astype(np.float32), ellipse_kernel(dilate), np.maximum) * 255.0
    if erode > 0:
        m = _morph((m == 255).astype(np.float32), ellipse_kernel(erode), np.minimum) * 255.0
    return (m / np.float32(255.0)).astype(np.float32)


# ============================================================================================
# memory read: anisotropic L2 similarity, top-k softmax, sparse readout
# (upstream model/utils/memory_utils.py get_similarity / do_softmax, memory_manager.read)

def similarity(mem_key: np.ndarray, mem_shrinkage: np.ndarray, query_key: np.ndarray,
               query_selection: np.ndarray) -> np.ndarray:
    """mem_key [CK, N], mem_shrinkage [N], query_key [CK, HW], query_selection [CK, HW]
    -> S [N, HW], S[n, q] = -sum_c sel[c,q] * (mk[c,n] - qk[c,q])^2 * shrink[n] / sqrt(CK).

    Expanded exactly as upstream computes it (same order of operations):
        a_sq   [N, HW] = (mk^2)^T @ sel
        two_ab [N, HW] = 2 * (mk^T @ (qk * sel))
        b_sq   [1, HW] = sum_c (sel * qk^2)
        S = ((-a_sq + two_ab) - b_sq) * shrink[n] / sqrt(CK)
    """
    ck = mem_key.shape[0]
    mk_t = mem_key.T                                               # [N, CK]
    a_sq = (mk_t * mk_t) @ query_selection                          # [N, HW]
    two_ab = np.float32(2.0) * (mk_t @ (query_key * query_selection))  # [N, HW]
    b_sq = (query_selection * query_key * query_key).sum(axis=0, keepdims=True)  # [1, HW]
    s = (-a_sq + two_ab) - b_sq
    s = s * mem_shrinkage[:, None]
    return s / np.float32(math.sqrt(ck))


def topk_softmax(s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """S [N, HW] -> (idx int64 [k, HW], weight float32 [k, HW]).

    For every query column q: the k largest S[:, q] (any order; ties between equal values may be
    broken either way), softmax over those k only. Upstream computes exp(v) / sum(exp(v)) WITHOUT
    subtracting the max (NaN when all k values are below ~-87); here the column max is subtracted
    first, which is the same value mathematically.
    """
    n = s.shape[0]
    k = min(k, n)
    idx = np.argpartition(s, n - k, axis=0)[n - k:]                 # [k, HW]
    vals = np.take_along_axis(s, idx, axis=0)                       # [k, HW]
    e = np.exp(vals - vals.max(axis=0, keepdims=True))
    return idx, (e / e.sum(axis=0, keepdims=True)).astype(np.float32)


def sparse_readout(mem_value: np.ndarray, idx: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """mem_value [CV, N], idx/weight [k, HW] -> readout [CV, HW],
    readout[c, q] = sum_j weight[j, q] * mem_value[c, idx[j, q]]
    (= upstream's dense mem_value @ affinity, affinity [N, HW] being zero outside the top k)."""
    gathered = mem_value[:, idx]                                    # [CV, k, HW]
    return np.einsum('ckq,kq->cq', gathered, weight, optimize=False).astype(np.float32)


# ============================================================================================
# working memory (upstream KeyValueMemoryStore, no long-term memory, one bucket, one object)

class WorkingMemory:
    """Frames of (key [CK, HW], shrinkage [HW], mask value [CV, HW]).

    Token order along N: the permanent frame first, then the temporary frames oldest -> newest.
    At most `max_mem_frames` frames: 1 permanent + (max_mem_frames - 1) temporary, FIFO.
    (Upstream keeps one [CK, N] tensor and appends along N; `max_work_tokens =
    (max_mem_frames - 1) * HW` counts temporary tokens only, the permanent frame is extra.)
    """

    def __init__(self, max_mem_frames: int):
        self.max_temporary = max_mem_frames - 1
        self.clear()

    def clear(self):
        self.permanent = None   # (key, shrinkage, value) or None
        self.temporary = []     # list of (key, shrinkage, value), oldest first
        self.evicted = 0        # frames dropped by the FIFO since the last clear (statistics)

    def add(self, key: np.ndarray, shrinkage: np.ndarray, value: np.ndarray):
        """key [CK, HW], shrinkage [HW], value [CV, HW]. The first frame added to an empty memory
        becomes permanent (upstream as_permanent='first'); later ones are temporary and the
        oldest temporary frame is dropped once there are more than max_mem_frames - 1."""
        entry = (key, shrinkage, value)
        if self.permanent is None:
            self.permanent = entry
            return
        self.temporary.append(entry)
        if len(self.temporary) > self.max_temporary:
            self.temporary.pop(0)
            self.evicted += 1

    @property
    def frames(self) -> int:
        return (self.permanent is not None) + len(self.temporary)

    def concat(self):
        """-> mem_key [CK, N], mem_shrinkage [N], mem_value [CV, N], N = frames * HW."""
        entries = [self.permanent] + self.temporary
        return (np.concatenate([e[0] for e in entries], axis=1),
                np.concatenate([e[1] for e in entries], axis=0),
                np.concatenate([e[2] for e in entries], axis=1))


# ============================================================================================
# the step schedule

class MatAnyone2Glue:
    def __init__(self, model_dir: str | Path, *, warmup: int | None = None,
                 seed_dilate: int | None = None, seed_erode: int | None = None,
                 intra_op_threads: int = 0, models: Models | None = None,
                 top_k: int | None = None, mem_every: int | None = None,
                 max_mem_frames: int | None = None, stagger_updates: int | None = None):
        # `models`: sessions of model_dir made by the caller (e.g. a subclass that records calls);
        # the keyword settings override the manifest's (the element's properties, tools/serve)
        self.models = models if models is not None else Models(model_dir, intra_op_threads)
        cfg = self.models.manifest['config']
        pick = lambda given, key: int(cfg[key] if given is None else given)
        self.top_k = pick(top_k, 'top_k')                            # 30
        self.mem_every = pick(mem_every, 'mem_every')                # 5
        self.max_mem_frames = pick(max_mem_frames, 'max_mem_frames')  # 5
        stagger = pick(stagger_updates, 'stagger_updates')           # 5
        self.warmup = int(cfg.get('warmup', 10) if warmup is None else warmup)
        self.seed_dilate = int(cfg.get('seed_dilate', 10) if seed_dilate is None else seed_dilate)
        self.seed_erode = int(cfg.get('seed_erode', 10) if seed_erode is None else seed_erode)
        # (t - last_mem_t) values at which the decoder's sensory update is kept.
        # With stagger_updates >= mem_every this is {1..mem_every}: every frame.
        if stagger >= self.mem_every:
            self.stagger_ti = set(range(1, self.mem_every + 1))
        else:
            self.stagger_ti = set(int(v) for v in np.round(np.linspace(1, self.mem_every, stagger)))
        self.memory = WorkingMemory(self.max_mem_frames)
        self.reset()

    # ---------------------------------------------------------------------------------------
    def reset(self):
        self.t = -1                 # upstream curr_ti
        self.last_mem_t = 0         # upstream last_mem_ti
        self.pads = None            # (top, bottom, left, right)
        self.size = None            # (H, W) of the caller's frames
        self.memory.clear()
        self.obj_memory = None      # [1, Q, CV+1] running sum of object summaries
        self.sensory = None         # [1, CV, h, w] sensory memory (GRU hidden state)
        self.last_alpha = None      # [1, 1, Hp, Wp] previous alpha (padded), upstream last_mask
        self.last_pix_feat = None   # [1, CV, h, w] previous frame's pix_feat
        self.last_mask_value = None  # [1, CV, h, w] previous frame's mask-encoder value
        self.passes = 0             # network passes run (for statistics)
        self.last_uncertainty = None  # [1, 1, h, w] uncert_prob of the last ordinary frame

    # ---------------------------------------------------------------------------------------
    def _image(self, frame: np.ndarray) -> np.ndarray:
        """RGB [H, W, 3] uint8 or float in [0,1] -> padded float32 [1, 3, Hp, Wp]."""
        if frame.shape[:2] != self.size or frame.shape[2] != 3:
            raise ValueError(f'frame shape {frame.shape}, expected {self.size + (3,)}')
        if frame.dtype == np.uint8:
            img = frame.astype(np.float32) / np.float32(255.0)
        else:
            img = frame.astype(np.float32, copy=False)
        chw = np.ascontiguousarray(img.transpose(2, 0, 1))             # [3, H, W]
        return pad_chw(chw, self.pads)[None]                          # [1, 3, Hp, Wp]

    def _encode(self, image: np.ndarray) -> dict[str, np.ndarray]:
        """encoder: image [1,3,Hp,Wp] -> f16, f8, f4, f2, f1, pix_feat, key, shrinkage, selection."""
        return self.models.run('encoder', image=image)

    def _output(self, alpha: np.ndarray) -> np.ndarray:
        """alpha [1, 1, Hp, Wp] -> [H, W]."""
        return np.ascontiguousarray(unpad_hw(alpha[0, 0], self.pads))

    def _memorize(self, enc: dict, alpha: np.ndarray) -> None:
        """Upstream _add_memory(..., is_deep_update=True) for the frame encoded as `enc` whose
        alpha [1,1,Hp,Wp] has just been stored as last_alpha.

        maskencoder(f1, pix_feat, alpha) -> mask_value
        memframe(mask_value, sensory, alpha) -> sensory (deep update), obj_summary
        object memory += obj_summary; working memory += (key, shrinkage, mask_value)
        """
        mv = self.models.run('maskencoder', f1=enc['f1'], pix_feat=enc['pix_feat'], mask=alpha)
        mask_value = mv['mask_value']                                    # [1, CV, h, w]
        mf = self.models.run('memframe', mask_value=mask_value, sensory=self.sensory, mask=alpha)
        if self.obj_memory is None:
            self.obj_memory = mf['obj_summary']                          # [1, Q, CV+1]
        else:
            self.obj_memory = self.obj_memory + mf['obj_summary']        # elementwise sum
        ck = enc['key'].shape[1]
        cv = mask_value.shape[1]
        self.memory.add(enc['key'].reshape(ck, -1),                    # [CK, HW]
                        enc['shrinkage'].reshape(-1),                  # [HW]
                        mask_value.reshape(cv, -1))                    # [CV, HW]
        self.last_mem_t = self.t
        self.sensory = mf['sensory_out']                                 # deep update replaces it
        self.last_mask_value = mask_value

    # ---------------------------------------------------------------------------------------
    def start(self, frame: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Seed step with the first-frame mask, then warmup + 1 first-frame passes.
        Returns frame 0's alpha [H, W] (the output of the last pass)."""
        self.reset()
        self.size = tuple(frame.shape[:2])
        self.pads = pad_amounts(*self.size)
        if mask.shape != self.size:
            raise ValueError(f'mask shape {mask.shape} != frame size {self.size}')
        enc = self._encode(self._image(frame))   # frame 0 never changes: its encoding is reused
        seed = prepare_seed_mask(mask, self.seed_dilate, self.seed_erode)      # [H, W]
        return self.start_encoded(enc, seed, self.size, self.pads)

    def start_encoded(self, enc: dict, seed: np.ndarray, size, pads, warmup: int | None = None) -> np.ndarray:
        """`start` on a frame already encoded (`enc`, padded by `pads`; the caller's frame is `size`)
        with a prepared seed alpha float32 [H, W] in [0, 1]; `warmup` overrides the warm-up count.
        (Several objects share one encoding this way: the server's people, tools/serve.)"""
        self.reset()
        self.size, self.pads = tuple(size), pads
        # ---- seed step: upstream step(image, mask, objects=[1]) -------------------------
        self.t = 0
        alpha = pad_chw(seed[None].astype(np.float32), self.pads)[None]      # [1,1,Hp,Wp]
        h, w = enc['pix_feat'].shape[2:]
        self.sensory = np.zeros((1, enc['pix_feat'].shape[1], h, w), np.float32)
        self.last_alpha = alpha
        self.last_pix_feat = enc['pix_feat']
        self._memorize(enc, alpha)   # permanent memory = frame 0 with the given mask
        self.passes += 1

        # ---- warm-up: upstream step(image, first_frame_pred=True), warmup + 1 times ------
        for _ in range((self.warmup if warmup is None else warmup) + 1):
            alpha = self._first_frame_pass(enc)
        return self._output(alpha)

    def _first_frame_pass(self, enc: dict) -> np.ndarray:
        """t forced to 0; segment reading NO affinity and NO uncertainty (the pixel-memory input
        of the readout network is last_mask_value itself); always update sensory; then clear the
        working and object memory and store this frame as the new permanent memory."""
        self.t = 0
        self.last_mem_t = 0
        # readout: pixel fusion + object transformer
        mem_readout = self.models.run(
            'readout', pix_feat=enc['pix_feat'], visual_readout=self.last_mask_value,
            sensory=self.sensory, last_mask=self.last_alpha,
            obj_memory=self.obj_memory)['mem_readout']
        dec = self.models.run('decoder', f8=enc['f8'], f4=enc['f4'], f2=enc['f2'], f1=enc['f1'],
                              mem_readout=mem_readout, sensory=self.sensory)
        self.sensory = dec['sensory_out']            # update_sensory is forced True
        alpha = dec['alpha']
        self.last_alpha = alpha
        self.last_pix_feat = enc['pix_feat']
        # clear_temp_mem(): working memory and object memory (sensory is kept)
        self.memory.clear()
        self.obj_memory = None
        self._memorize(enc, alpha)                   # becomes the permanent frame
        self.passes += 1
        return alpha

    # ---------------------------------------------------------------------------------------
    def step(self, frame: np.ndarray) -> np.ndarray:
        """One ordinary frame (t >= 1) -> alpha [H, W]."""
        if self.memory.frames == 0:
            raise RuntimeError('call start(frame0, mask) first')
        return self.step_encoded(self._encode(self._image(frame)))

    def step_encoded(self, enc: dict) -> np.ndarray:
        """`step` on a frame already encoded (padded as the seed's frame was)."""
        if self.memory.frames == 0:
            raise RuntimeError('call start(frame0, mask) first')
        self.t += 1
        is_mem_frame = (self.t - self.last_mem_t) >= self.mem_every
        update_sensory = (self.t - self.last_mem_t) in self.stagger_ti

        ck = enc['key'].shape[1]
        h, w = enc['key'].shape[2:]
        hw = h * w

        # ---- memory read (upstream MemoryManager.read) ------------------------------------
        mem_key, mem_shrinkage, mem_value = self.memory.concat()      # [CK,N] [N] [CV,N]
        s = similarity(mem_key, mem_shrinkage,
                       enc['key'].reshape(ck, hw), enc['selection'].reshape(ck, hw))  # [N, HW]
        idx, weight = topk_softmax(s, self.top_k)                       # [k, HW] each
        readout = sparse_readout(mem_value, idx, weight)                # [CV, HW]
        readout = readout.reshape(1, -1, h, w)                          # [1, CV, h, w]

        # uncertainty blend: p [1,1,h,w]; visual = readout * p + last_mask_value * (1 - p)
        p = self.models.run('uncert', last_pix_feat=self.last_pix_feat, pix_feat=enc['pix_feat'],
                            last_mask=self.last_alpha,
                            mem_val_diff=readout - self.last_mask_value)['uncert_prob']
        visual = readout * p + self.last_mask_value * (np.float32(1.0) - p)
        self.last_uncertainty = p                                        # [1,1,h,w] (the quality watch's)

        mem_readout = self.models.run(
            'readout', pix_feat=enc['pix_feat'], visual_readout=visual, sensory=self.sensory,
            last_mask=self.last_alpha, obj_memory=self.obj_memory)['mem_readout']

        # ---- decode (upstream segment) --------------------------------------------------------
        dec = self.models.run('decoder', f8=enc['f8'], f4=enc['f4'], f2=enc['f2'], f1=enc['f1'],
                              mem_readout=mem_readout, sensory=self.sensory)
        if update_sensory:
            self.sensory = dec['sensory_out']
        alpha = dec['alpha']                                              # [1, 1, Hp, Wp]
        self.last_alpha = alpha
        self.last_pix_feat = enc['pix_feat']

        # ---- memorise --------------------------------------------------------------------------
        if is_mem_frame:
            self._memorize(enc, alpha)
        else:
            self.last_mask_value = self.models.run(
                'maskencoder', f1=enc['f1'], pix_feat=enc['pix_feat'], mask=alpha)['mask_value']
        self.passes += 1
        return self._output(alpha)

    # ---------------------------------------------------------------------------------------
    def run(self, frames, mask: np.ndarray) -> np.ndarray:
        """frames: [T, H, W, 3] (or an iterable of frames) -> alphas float32 [T, H, W]."""
        out = []
        for i, frame in enumerate(frames):
            out.append(self.start(frame, mask) if i == 0 else self.step(frame))
        return np.stack(out)
