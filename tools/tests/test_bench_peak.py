"""tools/bench.py: the floor's peak (a MatMul through ONNX Runtime) and the CPU's ISA and theoretical
fp32 peak beside it, from sample /proc/cpuinfo text. The MatMuls here are small: the test checks the
plumbing, not the machine."""

from __future__ import annotations

import math
import sys

import pytest

from tools.bench import (_matmul_model_bytes, cpu_description, matmul_model, ort_matmul_peak_gflops,
                         parse_cpuinfo, theoretical_gflops)


def cpuinfo(vendor: str, family: int, model: str, mhz: str, flags: str, siblings: int = 2, cores: int = 2) -> str:
    """Two processor blocks of /proc/cpuinfo as Linux writes them on x86 (only the first is read)."""
    block = (f'vendor_id\t: {vendor}\ncpu family\t: {family}\nmodel name\t: {model}\ncpu MHz\t\t: {mhz}\n'
             f'siblings\t: {siblings}\ncpu cores\t: {cores}\nflags\t\t: {flags}\n')
    return f'processor\t: 0\n{block}\nprocessor\t: 1\n{block.replace(mhz, "1200.000")}\n'


BASE = 'fpu vme de pse tsc msr pae mce cx8 apic sep sse sse2 ssse3 sse4_1 sse4_2 popcnt'
AVX2 = BASE + ' avx f16c fma avx2 bmi1 bmi2'
AVX512 = AVX2 + ' avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni'
ICELAKE = cpuinfo('GenuineIntel', 6, 'Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz', '2900.000', AVX512)
ZEN4 = cpuinfo('AuthenticAMD', 25, 'AMD EPYC 9R14', '2596.144', AVX512 + ' avx512_bf16')
ZEN3 = cpuinfo('AuthenticAMD', 25, 'AMD EPYC 7R13 Processor', '2650.000', AVX2)
OLD = cpuinfo('GenuineIntel', 6, 'Intel(R) Xeon(R) CPU X5670 @ 2.93GHz', '2933.000', BASE, siblings=4, cores=2)
ARM = 'processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\nCPU part\t: 0xd0c\n'


@pytest.mark.parametrize('text, isa, lanes, fma_units, ghz', [
    (ICELAKE, 'avx512f', 16, 2, 2.9),
    (ZEN4, 'avx512f', 16, 1, 2.596144),  # 512-bit FMAs as two halves on two 256-bit pipes
    (ZEN3, 'avx2+fma', 8, 2, 2.65),
    (OLD, 'sse', 4, 1, 2.933),  # no FMA: a multiply and an add pipe
    (ARM, 'unknown', None, None, None),
])
def test_parse_cpuinfo(text, isa, lanes, fma_units, ghz):
    info = parse_cpuinfo(text)
    assert (info['isa'], info['lanes'], info['fma_units']) == (isa, lanes, fma_units)
    assert info['ghz'] == (pytest.approx(ghz) if ghz else None)  # the first CPU's clock, not the second's


def test_parse_cpuinfo_model_and_smt():
    assert parse_cpuinfo(ICELAKE)['model'] == 'Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz'
    assert parse_cpuinfo(ICELAKE)['threads_per_core'] == 1
    assert parse_cpuinfo(OLD)['threads_per_core'] == 2
    assert parse_cpuinfo(ARM)['model'] == 'unknown'


def test_theoretical_peak_arithmetic():
    # cores × lanes × 2 (FMA) × FMA units × GHz
    assert theoretical_gflops(2, 16, 2, 2.45) == pytest.approx(313.6)
    assert theoretical_gflops(2, 8, 2, 3.0) == pytest.approx(192.0)
    assert theoretical_gflops(1, 4, 1, 2.0) == pytest.approx(16.0)
    assert theoretical_gflops(2, None, None, 2.0) is None
    assert theoretical_gflops(2, 16, 2, None) is None


def test_cpu_description_uses_threads_and_reports_openblas(monkeypatch):
    monkeypatch.setenv('OPENBLAS_CORETYPE', 'Haswell')
    cpu = cpu_description(threads=1, cpuinfo=ICELAKE)
    assert (cpu['isa'], cpu['cores_used']) == ('avx512f', 1)
    assert cpu['theoretical_gflops'] == pytest.approx(1 * 16 * 2 * 2 * 2.9)
    assert cpu['openblas_coretype'] == 'Haswell'
    monkeypatch.delenv('OPENBLAS_CORETYPE')
    cpu = cpu_description(threads=0, cpuinfo=ZEN3)  # 0: every core this process may use
    assert cpu['cores_used'] >= 1 and cpu['openblas_coretype'] is None
    assert cpu['theoretical_gflops'] == pytest.approx(cpu['cores_used'] * 8 * 2 * 2 * 2.65)
    assert cpu_description(threads=1, cpuinfo=ARM)['theoretical_gflops'] is None


def test_ort_matmul_peak_is_a_positive_rate():
    pytest.importorskip('onnxruntime')
    for threads in (0, 1):
        peak = ort_matmul_peak_gflops(threads, n=256, runs=3)
        assert math.isfinite(peak) and peak > 0


def test_matmul_model_without_onnx(monkeypatch):
    """The hand-written ModelProto is the one onnx writes, and ONNX Runtime runs it."""
    pytest.importorskip('onnxruntime')
    try:
        import onnx  # noqa: F401
    except ImportError:
        pass
    else:
        assert _matmul_model_bytes(96) == matmul_model(96)
    monkeypatch.setitem(sys.modules, 'onnx', None)  # `from onnx import …` now raises ImportError
    assert matmul_model(96) == _matmul_model_bytes(96)
    peak = ort_matmul_peak_gflops(1, n=96, runs=2)
    assert math.isfinite(peak) and peak > 0



def test_parse_stats_reads_quoted_values_whole():
    """A string GStreamer quotes (model-placement's commas and equals signs) is one value, unescaped;
    the fields around it are read as before."""
    from tools.bench import parse_stats
    line = ('/GstPipeline:pipeline0/GstMatteFilter:matanyone0: matanyone-stats, frame=(guint64)7, '
            'model-placement=(string)"encoder\\=bf16\\,uncert\\=cpu", total-ms=(double)412.5, seeded=(boolean)true, '
            'engine=(string)matanyone2;')
    assert parse_stats(line) == [{'frame': 7, 'model-placement': 'encoder=bf16,uncert=cpu', 'total-ms': 412.5,
                                  'seeded': True, 'engine': 'matanyone2'}]


def test_unquote_reads_gstreamer_escapes():
    """Backslash before a character is that character; three octal digits are a byte (UTF-8)."""
    from tools.bench import unquote
    assert unquote('encoder\\=bf16\\,uncert\\=cpu') == 'encoder=bf16,uncert=cpu'
    assert unquote('caf\\303\\251 \\"x\\" a\\\\b') == 'café "x" a\\b'
