"""Build the upstream MatAnyone2 network (the `matanyone2` package) with real or random weights.

Shared by export.py and reference.py so that an exported ONNX set and a PyTorch reference run are
built by exactly the same code.

* `build_network(checkpoint=...)` loads `matanyone2.pth` after checking that it really is a
  MatAnyone2 state dict (every key the network needs, no foreign keys, matching shapes).
* `build_network(random_init_seed=...)` builds deterministic, well-conditioned random weights:
  upstream's own initialisers under `torch.manual_seed(seed)`, then
    1. key and shrinkage projections scaled by 0.3, so that the anisotropic-L2 similarities stay
       in a range where upstream's top-k softmax (which does not subtract the max) is finite;
    2. every BatchNorm's running statistics calibrated on a few procedural images (1/f noise
       with a foreground blob; generated from the seed, so no media file is needed);
    3. the matting head (`mask_decoder.pred_mat`) rescaled so that alpha on the calibration frame
       has mean 0.5 and standard deviation 0.15 (so alpha is not clamped to 0 or 1 everywhere and
       a parity test really compares something).
* The `*Net` modules at the end are the stateless sub-networks that export.py turns into ONNX.
  They call the unmodified upstream modules; they only add/remove the object dimension.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .media import sha256_file  # noqa: F401 (kept here for callers of network.sha256_file)

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
LICENSE_TEXT_FILE = HERE / 'LICENSE-S-Lab-1.0.txt'
LICENSE_NAME = 'NTU S-Lab License 1.0 (non-commercial)'
RANDOM_LICENSE = 'random weights (no licence restriction)'

# The configuration every exported set is built with (upstream's eval config + model/base.yaml).
EXPECTED_CONFIG = {
    'key_dim': 64,
    'value_dim': 256,
    'sensory_dim': 256,
    'num_queries': 16,
    'top_k': 30,
    'mem_every': 5,
    'max_mem_frames': 5,
    'stagger_updates': 5,
}

# Keys of the upstream state dict that inference never reads. A checkpoint may lack them.
OPTIONAL_KEY_PREFIXES = ('aux_computer.',)

KEY_SCALE = 0.3        # random init: key projection scale (best similarity >= ~-20 on real frames)
SHRINKAGE_SCALE = 0.3  # random init: shrinkage projection scale (shrinkage in ~[1, 2])
CALIB_SIZE = (192, 320)  # random init: H, W of the procedural calibration images
CALIB_COUNT = 4
ALPHA_MEAN, ALPHA_STD = 0.5, 0.15


class CheckpointError(ValueError):
    """The file is not a usable MatAnyone2 checkpoint."""


# --------------------------------------------------------------------------------------------
# upstream package

def import_upstream():
    """Import the upstream package; returns the `matanyone2` module.

    `matanyone2.utils.inference_utils` imports torchvision at module level for its video reader,
    which nothing here uses. If torchvision is not installed a placeholder module stands in for it,
    so torchvision is not a dependency of this toolchain.
    """
    stub = None
    if 'matanyone2.utils.inference_utils' not in sys.modules and \
            importlib.util.find_spec('torchvision') is None:
        stub = sys.modules['torchvision'] = types.ModuleType('torchvision')
    try:
        mod = importlib.import_module('matanyone2')
        importlib.import_module('matanyone2.model.matanyone2')
        importlib.import_module('matanyone2.inference.inference_core')
    finally:
        # take the placeholder out again: torch.onnx probes for a real torchvision
        if stub is not None and sys.modules.get('torchvision') is stub:
            del sys.modules['torchvision']
    return mod


def load_config():
    """Upstream's eval config with model/base.yaml under `model`, without hydra.

    `pretrained_resnet=False`: the ResNets are not initialised from ImageNet downloads.
    """
    from omegaconf import OmegaConf
    mod = import_upstream()
    cfg_dir = Path(mod.__file__).resolve().parent / 'config'
    cfg = OmegaConf.load(cfg_dir / 'eval_matanyone_config.yaml')
    for k in ('defaults', 'hydra'):
        if k in cfg:
            del cfg[k]
    cfg.model = OmegaConf.load(cfg_dir / 'model' / 'base.yaml')
    cfg.model.pretrained_resnet = False
    OmegaConf.resolve(cfg)
    got = config_summary(cfg)
    if got != EXPECTED_CONFIG:
        raise RuntimeError(f'upstream config differs from what this toolchain was written for: '
                           f'{got} != {EXPECTED_CONFIG}')
    if cfg.use_long_term or cfg.flip_aug or cfg.max_internal_size > 0 or cfg.chunk_size > 0:
        raise RuntimeError('upstream config enables long-term memory / flip / resizing / chunking')
    if cfg.model.pixel_encoder.type != 'resnet50' or cfg.model.mask_encoder.type != 'resnet18':
        raise RuntimeError('unexpected encoder types in upstream config')
    return cfg


def config_summary(cfg) -> dict:
    return {
        'key_dim': int(cfg.model.key_dim),
        'value_dim': int(cfg.model.value_dim),
        'sensory_dim': int(cfg.model.sensory_dim),
        'num_queries': int(cfg.model.object_transformer.num_queries),
        'top_k': int(cfg.top_k),
        'mem_every': int(cfg.mem_every),
        'max_mem_frames': int(cfg.max_mem_frames),
        'stagger_updates': int(cfg.stagger_updates),
    }


@dataclass
class BuiltNetwork:
    net: nn.Module          # upstream MatAnyone2, eval mode, fp32, CPU
    weights: str            # manifest "weights" string
    license: str            # manifest "license" string
    from_checkpoint: bool


def build_network(checkpoint: str | Path | None = None,
                  random_init_seed: int | None = None) -> BuiltNetwork:
    if (checkpoint is None) == (random_init_seed is None):
        raise ValueError('give exactly one of checkpoint / random_init_seed')
    import_upstream()
    from matanyone2.model.matanyone2 import MatAnyone2
    cfg = load_config()
    if checkpoint is not None:
        checkpoint = Path(checkpoint)
        state = load_state_dict(checkpoint)
        net = MatAnyone2(cfg, single_object=True).eval()
        validate_state_dict(state, net, source=str(checkpoint))
        net.load_weights(state)
        net.eval()
        weights = f'checkpoint sha256 {sha256_file(checkpoint)}'
        built = BuiltNetwork(net, weights, LICENSE_NAME, True)
    else:
        seed = int(random_init_seed)
        torch.manual_seed(seed)
        net = MatAnyone2(cfg, single_object=True).eval()
        condition_random_weights(net, seed)
        built = BuiltNetwork(net, f'random-init seed {seed}', RANDOM_LICENSE, False)
    for p in built.net.parameters():
        p.requires_grad_(False)
    reset_positional_caches(built.net)
    return built


def reset_positional_caches(net: nn.Module) -> None:
    """PositionalEncoding caches its table per input shape; clear it (before export, after runs)."""
    for m in net.modules():
        if hasattr(m, 'cached_penc'):
            m.cached_penc = None


# --------------------------------------------------------------------------------------------
# checkpoints

def load_state_dict(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f'{path}: no such file')
    try:
        obj = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:  # pickle errors, zip errors, foreign objects
        raise CheckpointError(f'{path}: not a loadable PyTorch checkpoint ({type(e).__name__}: {e})') from e
    # upstream saves a plain state dict; accept the usual wrappers too
    for wrapper in ('model', 'state_dict', 'network', 'weights'):
        if isinstance(obj, dict) and wrapper in obj and isinstance(obj[wrapper], dict):
            obj = obj[wrapper]
    if not isinstance(obj, dict) or not obj:
        raise CheckpointError(f'{path}: not a state dict (got {type(obj).__name__})')
    bad = [k for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise CheckpointError(f'{path}: not a state dict: non-tensor entries {bad[:5]}')
    return dict(obj)


def _show(keys, n=6) -> str:
    """'a.x, a.y, b.z, … (12 more; by module: a 10, b 4)'"""
    keys = sorted(keys)
    s = ', '.join(keys[:n])
    if len(keys) > n:
        groups = {}
        for k in keys:
            top = k.split('.', 1)[0]
            groups[top] = groups.get(top, 0) + 1
        by = ', '.join(f'{g} {c}' for g, c in sorted(groups.items(), key=lambda x: -x[1]))
        s += f', … ({len(keys) - n} more; by module: {by})'
    return s


def validate_state_dict(state: dict, net: nn.Module, source: str = 'checkpoint') -> None:
    """Raise CheckpointError unless `state` is a MatAnyone2 (single- or multi-object) state dict.

    Upstream's own `load_weights` uses `strict=False` and would silently accept anything.
    """
    own = net.state_dict()
    required = {k for k in own if not k.startswith(OPTIONAL_KEY_PREFIXES)
                and not k.endswith('num_batches_tracked')}
    missing = required - set(state)
    unexpected = {k for k in state if k not in own}
    mismatched = []
    for k in set(state) & set(own):
        want, got = tuple(own[k].shape), tuple(state[k].shape)
        if want == got:
            continue
        # load_weights() converts multi-object checkpoints (one more input channel) itself
        if k in ('mask_encoder.conv1.weight', 'pixel_fuser.sensory_compress.weight') \
                and len(got) == 4 and got[1] == want[1] + 1 and got[0] == want[0] and got[2:] == want[2:]:
            continue
        mismatched.append(f'{k}: {got} (expected {want})')
    if missing or unexpected or mismatched:
        parts = [f'{source} is not a MatAnyone2 checkpoint']
        if missing:
            parts.append(f'{len(missing)} of {len(required)} required keys missing: {_show(missing)}')
        if unexpected:
            parts.append(f'{len(unexpected)} unexpected keys: {_show(unexpected)}')
        if mismatched:
            parts.append(f'{len(mismatched)} shape mismatches: {_show(mismatched, 4)}')
        raise CheckpointError('; '.join(parts))


# --------------------------------------------------------------------------------------------
# well-conditioned random weights

def calibration_images(seed: int, count: int = CALIB_COUNT, size=CALIB_SIZE):
    """Procedural stand-ins for natural frames: 1/f^a colour noise (a in [1.3, 2], i.e. from
    textured to smooth) at varied brightness and contrast, with an elliptic 'person' blob of a
    different tint. Deterministic in `seed` (numpy PCG64).

    Returns images float32 [count,3,H,W] in [0,1] and masks float32 [count,1,H,W] in {0,1}.
    """
    h, w = size
    rng = np.random.default_rng(seed + 7919)
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.rfftfreq(w)[None, :]
    radius = np.sqrt(fy ** 2 + fx ** 2)
    radius[0, 0] = 1.0
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    images, masks = [], []
    for i in range(count):
        exponent = 1.3 + 0.7 * i / max(count - 1, 1)
        amp = 1.0 / radius ** exponent
        amp[0, 0] = 0.0
        base = []
        for _c in range(4):
            spec = amp * (rng.standard_normal(amp.shape) + 1j * rng.standard_normal(amp.shape))
            field = np.fft.irfft2(spec, s=(h, w))
            base.append(field / (field.std() + 1e-12))
        mix = rng.uniform(0.3, 1.0, size=(3, 4))
        rgb = np.stack([sum(mix[c, k] * base[k] for k in range(4)) for c in range(3)])
        rgb = rgb / (rgb.std(axis=(1, 2), keepdims=True) + 1e-12)
        brightness = 0.3 + 0.45 * ((i * 0.618) % 1.0)
        rgb = brightness + rng.uniform(0.1, 0.2) * rgb + rng.uniform(-0.05, 0.05, size=(3, 1, 1))
        cy, cx = rng.uniform(0.35, 0.65) * h, rng.uniform(0.3, 0.7) * w
        ry, rx = rng.uniform(0.25, 0.4) * h, rng.uniform(0.1, 0.2) * w
        m = (((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0).astype(np.float64)
        tint = rng.uniform(-0.25, 0.25, size=(3, 1, 1))
        rgb = rgb + m[None] * tint
        images.append(np.clip(rgb, 0.0, 1.0))
        masks.append(m[None])
    return (torch.from_numpy(np.stack(images).astype(np.float32)),
            torch.from_numpy(np.stack(masks).astype(np.float32)))


def _calibrate_bn(module: nn.Module, run) -> None:
    """Set every BatchNorm2d under `module` to the batch statistics seen while running `run()`."""
    bns = [m for m in module.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average: one batch -> exactly its statistics
        m.training = True
    try:
        with torch.no_grad():
            run()
    finally:
        for m in bns:
            m.training = False
            m.momentum = 0.1


@torch.no_grad()
def condition_random_weights(net: nn.Module, seed: int) -> None:
    net.key_proj.key_proj.weight.mul_(KEY_SCALE)
    net.key_proj.key_proj.bias.mul_(KEY_SCALE)
    net.key_proj.d_proj.weight.mul_(SHRINKAGE_SCALE)
    net.key_proj.d_proj.bias.mul_(SHRINKAGE_SCALE)

    images, masks = calibration_images(seed)
    n = images.shape[0]

    # 1. pixel encoder (ResNet-50)
    _calibrate_bn(net.pixel_encoder, lambda: net.encode_image(images))
    ms, pix_feat = net.encode_image(images)
    f1 = ms[4]

    # 2. mask encoder (ResNet-18); upstream feeds it the normalised image (= f1)
    _calibrate_bn(net.mask_encoder,
                  lambda: net.mask_encoder(f1, pix_feat, None, masks, None, deep_update=False))
    mask_value, _ = net.mask_encoder(f1, pix_feat, None, masks, None, deep_update=False)

    # 3. uncertainty head: pairs (frame i-1 -> frame i)
    prev = [(i - 1) % n for i in range(n)]
    _calibrate_bn(net.temp_sparity,
                  lambda: net.pred_uncertainty(pix_feat[prev], pix_feat, masks[prev],
                                               mask_value[:, 0] - mask_value[prev, 0]))

    # 4. matting head: what upstream computes in the seed step and the first first-frame pass,
    #    batched over the calibration frames (deep sensory update of a zero state, object summary,
    #    readout with the mask value as pixel memory, decoder); statistics of pred_mat's output.
    sensory, summary = MemFrameNet(net)(mask_value[:, 0], torch.zeros_like(pix_feat), masks)
    mem_readout = ReadoutNet(net)(pix_feat, mask_value[:, 0], sensory, masks, summary)
    outputs = []
    hook = net.mask_decoder.pred_mat.register_forward_hook(lambda m, i, o: outputs.append(o.detach()))
    try:
        DecoderNet(net)(ms[1], ms[2], ms[3], ms[4], mem_readout, sensory)
    finally:
        hook.remove()
        reset_positional_caches(net)
    y = outputs[0]
    mean, std = float(y.mean()), float(y.std())
    scale = ALPHA_STD / max(std, 1e-6)
    head = net.mask_decoder.pred_mat
    head.weight.mul_(scale)
    head.bias.copy_((head.bias - mean) * scale + ALPHA_MEAN)


# --------------------------------------------------------------------------------------------
# stateless sub-networks (exported to ONNX). B = 1, one object. h = H/16, w = W/16.

class EncoderNet(nn.Module):
    """image [1,3,H,W] RGB in [0,1] -> f16, f8, f4, f2, f1 (normalised image), pix_feat, key,
    shrinkage, selection. Upstream: encode_image + transform_key."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, image):
        ms, pix_feat = self.net.encode_image(image)
        key, shrinkage, selection = self.net.transform_key(ms[0])
        f16, f8, f4, f2, f1 = ms
        return f16, f8, f4, f2, f1, pix_feat, key, shrinkage, selection


class UncertNet(nn.Module):
    """last_pix_feat, pix_feat [1,256,h,w], last_mask [1,1,H,W], mem_val_diff [1,256,h,w]
    -> uncert_prob [1,1,h,w] (sigmoid applied). Upstream: pred_uncertainty()['prob']."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, last_pix_feat, pix_feat, last_mask, mem_val_diff):
        return self.net.pred_uncertainty(last_pix_feat, pix_feat, last_mask, mem_val_diff)['prob']


class ReadoutNet(nn.Module):
    """pix_feat, visual_readout, sensory [1,256,h,w], last_mask [1,1,H,W], obj_memory [1,16,257]
    -> mem_readout [1,256,h,w]. Upstream: pixel_fusion + readout_query (object transformer)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, pix_feat, visual_readout, sensory, last_mask, obj_memory):
        pixel = self.net.pixel_fusion(pix_feat, visual_readout.unsqueeze(1), sensory.unsqueeze(1),
                                      last_mask)
        mem_readout, _ = self.net.readout_query(pixel, obj_memory.unsqueeze(1).unsqueeze(1))
        return mem_readout[:, 0]


class DecoderNet(nn.Module):
    """f8, f4, f2, f1, mem_readout [1,256,h,w], sensory [1,256,h,w]
    -> alpha [1,1,H,W] (clamped to [0,1]), sensory_out [1,256,h,w] (GRU update from the decoder).

    Upstream's segment(..., update_sensory=True) with the object dimension dropped (one object):
    the same modules and weights, called in plain 4-D NCHW. Upstream keeps [B, objects, C, H, W]
    and reshapes around every convolution; those reshapes stop ONNX Runtime's blocked (NCHWc)
    convolution layout from spanning the decoder, which then reorders every full-resolution
    tensor in and out of it (about a fifth of the decoder's time). f16 is not used by the decoder.
    UpstreamDecoderNet is the original call; a test holds the two equal."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    @staticmethod
    def _upsample_block(block, g, skip):
        # MaskUpsampleBlock: bilinear x2, add the skip projection, GroupResBlock (pre-activation)
        g = F.interpolate(g, scale_factor=block.scale_factor, mode='bilinear')
        g = skip + g
        res = block.out_conv
        out = _conv(res.conv2, F.relu(_conv(res.conv1, F.relu(g))))
        if not isinstance(res.downsample, nn.Identity):
            g = _conv(res.downsample, g)
        return out + g

    def forward(self, f8, f4, f2, f1, mem_readout, sensory):
        dec = self.net.mask_decoder
        s8, s4, s2, s1 = [t(x) for t, x in zip(dec.decoder_feat_proc.transforms, (f8, f4, f2, f1))]
        p16 = mem_readout
        p8 = self._upsample_block(dec.up_16_8, p16, s8)
        p4 = self._upsample_block(dec.up_8_4, p8, s4)
        p2 = self._upsample_block(dec.up_4_2, p4, s2)
        p1 = self._upsample_block(dec.up_2_1, p2, s1)
        logits = dec.pred_mat(F.relu(p1))
        # SensoryUpdater_fullscale over [p16, p8, p4, p2, p1 + logits], area-downsampled to 1/16
        up = dec.sensory_update
        p1 = torch.cat([p1, logits], 1)
        g = _conv(up.g16_conv, p16)
        for conv, feat, ratio in ((up.g8_conv, p8, 1 / 2), (up.g4_conv, p4, 1 / 4),
                                  (up.g2_conv, p2, 1 / 8), (up.g1_conv, p1, 1 / 16)):
            g = g + _conv(conv, F.interpolate(feat, scale_factor=ratio, mode='area'))
        values = _conv(up.transform, torch.cat([g, sensory], 1))
        dim = values.shape[1] // 3
        forget_gate = torch.sigmoid(values[:, :dim])
        update_gate = torch.sigmoid(values[:, dim:dim * 2])
        new_value = torch.tanh(values[:, dim * 2:])
        new_sensory = forget_gate * sensory * (1 - update_gate) + update_gate * new_value
        return logits.clamp(0.0, 1.0), new_sensory


def _conv(conv: nn.Conv2d, x):
    """A (G)Conv2d's own convolution on a 4-D tensor, bypassing GConv2d's object reshapes."""
    return nn.Conv2d.forward(conv, x)


class UpstreamDecoderNet(nn.Module):
    """DecoderNet through upstream's own segment() (5-D, object dimension kept): the reference
    DecoderNet is tested against."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, f8, f4, f2, f1, mem_readout, sensory):
        new_sensory, _, prob = self.net.segment([None, f8, f4, f2, f1], mem_readout.unsqueeze(1),
                                                sensory.unsqueeze(1), update_sensory=True)
        return prob[:, 1:2], new_sensory[:, 0]


class MaskEncoderNet(nn.Module):
    """f1 (normalised image) [1,3,H,W], pix_feat [1,256,h,w], mask [1,1,H,W] -> mask_value
    [1,256,h,w]. Upstream: encode_mask (which normalises the raw image itself: identical to f1),
    without the deep sensory update and the object summary (see MemFrameNet)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, f1, pix_feat, mask):
        value, _ = self.net.mask_encoder(f1, pix_feat, None, mask, None, deep_update=False)
        return value[:, 0]


class MemFrameNet(nn.Module):
    """Memory frames only. mask_value [1,256,h,w], sensory [1,256,h,w], mask [1,1,H,W]
    -> sensory_out [1,256,h,w] (deep GRU update), obj_summary [1,16,257] (16 summaries of 256
    features + 1 area; queries 0-7 weighted by alpha, 8-15 by 1-alpha).
    Upstream: the deep_update and object_summarizer parts of encode_mask."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, mask_value, sensory, mask):
        value = mask_value.unsqueeze(1)
        new_sensory = self.net.mask_encoder.sensory_update(value, sensory.unsqueeze(1))
        summaries, _ = self.net.object_summarizer(mask, value)
        return new_sensory[:, 0], summaries[:, 0]


SUBNETS = {
    'encoder': EncoderNet,
    'uncert': UncertNet,
    'readout': ReadoutNet,
    'decoder': DecoderNet,
    'maskencoder': MaskEncoderNet,
    'memframe': MemFrameNet,
}

# names and symbolic shapes: 'H','W' full (padded) size; 'H/16' etc. strides.
IO_SPEC = {
    'encoder': (
        [('image', [1, 3, 'H', 'W'])],
        [('f16', [1, 1024, 'H/16', 'W/16']), ('f8', [1, 512, 'H/8', 'W/8']),
         ('f4', [1, 256, 'H/4', 'W/4']), ('f2', [1, 64, 'H/2', 'W/2']), ('f1', [1, 3, 'H', 'W']),
         ('pix_feat', [1, 256, 'H/16', 'W/16']), ('key', [1, 64, 'H/16', 'W/16']),
         ('shrinkage', [1, 1, 'H/16', 'W/16']), ('selection', [1, 64, 'H/16', 'W/16'])]),
    'uncert': (
        [('last_pix_feat', [1, 256, 'H/16', 'W/16']), ('pix_feat', [1, 256, 'H/16', 'W/16']),
         ('last_mask', [1, 1, 'H', 'W']), ('mem_val_diff', [1, 256, 'H/16', 'W/16'])],
        [('uncert_prob', [1, 1, 'H/16', 'W/16'])]),
    'readout': (
        [('pix_feat', [1, 256, 'H/16', 'W/16']), ('visual_readout', [1, 256, 'H/16', 'W/16']),
         ('sensory', [1, 256, 'H/16', 'W/16']), ('last_mask', [1, 1, 'H', 'W']),
         ('obj_memory', [1, 16, 257])],
        [('mem_readout', [1, 256, 'H/16', 'W/16'])]),
    'decoder': (
        [('f8', [1, 512, 'H/8', 'W/8']), ('f4', [1, 256, 'H/4', 'W/4']), ('f2', [1, 64, 'H/2', 'W/2']),
         ('f1', [1, 3, 'H', 'W']), ('mem_readout', [1, 256, 'H/16', 'W/16']),
         ('sensory', [1, 256, 'H/16', 'W/16'])],
        [('alpha', [1, 1, 'H', 'W']), ('sensory_out', [1, 256, 'H/16', 'W/16'])]),
    'maskencoder': (
        [('f1', [1, 3, 'H', 'W']), ('pix_feat', [1, 256, 'H/16', 'W/16']), ('mask', [1, 1, 'H', 'W'])],
        [('mask_value', [1, 256, 'H/16', 'W/16'])]),
    'memframe': (
        [('mask_value', [1, 256, 'H/16', 'W/16']), ('sensory', [1, 256, 'H/16', 'W/16']),
         ('mask', [1, 1, 'H', 'W'])],
        [('sensory_out', [1, 256, 'H/16', 'W/16']), ('obj_summary', [1, 16, 257])]),
}

_DIV = {'H': 1, 'W': 1, 'H/2': 2, 'W/2': 2, 'H/4': 4, 'W/4': 4, 'H/8': 8, 'W/8': 8,
        'H/16': 16, 'W/16': 16}


def concrete_shape(shape, height: int, width: int):
    out = []
    for d in shape:
        if isinstance(d, str):
            out.append((height if d.startswith('H') else width) // _DIV[d])
        else:
            out.append(d)
    return out


def example_inputs(name: str, height: int, width: int, seed: int = 0):
    """Plausible example inputs for tracing/testing a sub-network at (height, width)."""
    g = torch.Generator().manual_seed(seed)
    ins = []
    for iname, shape in IO_SPEC[name][0]:
        s = concrete_shape(shape, height, width)
        if iname in ('image',):
            t = torch.rand(s, generator=g)
        elif iname in ('last_mask', 'mask'):
            t = torch.rand(s, generator=g)
        elif iname == 'obj_memory':
            t = torch.rand(s, generator=g)
            t[..., -1] = t[..., -1] * 50 + 1
        else:
            t = torch.randn(s, generator=g) * 0.5
        ins.append(t)
    return tuple(ins)
