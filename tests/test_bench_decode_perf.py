"""bench/decode_perf.py groups perf's samples by what the sampled code does, for both engines alike (no timing
thresholds)."""

import pytest
import torch

from tests.bench_scripts import load_bench

# perf report lines as they come from real runs (torch 2.13 CPU, CTranslate2 4.8.5); columns trimmed
REPORT = """\
# Overhead  Shared Object  Symbol
    29.50%  libtorch_cpu.so                [.] mkl_blas_avx512_sgemm_kernel_0
    10.96%  libtorch_cpu.so                [.] mkl_blas_avx512_xsgemv
     2.65%  libtorch_cpu.so                [.] at::native::AVX512::serial_vec_log_softmax_lastdim_range<float>
     2.25%  libpython3.11.so.1.0           [.] _PyEval_EvalFrameDefault
     2.14%  libc.so.6                      [.] __memmove_avx512_unaligned_erms
     1.16%  libctranslate2.so.4.8.5        [.] ctranslate2::cpu::softmax<(ctranslate2::cpu::CpuIsa)2>(float const*)
     0.51%  libctranslate2.so.4.8.5        [.] ctranslate2::cpu::max<(ctranslate2::cpu::CpuIsa)2, float>
     0.52%  [kernel.kallsyms]              [k] exc_page_fault
     0.33%  libtorch_cpu.so                [.] c10::impl::OperatorEntry::lookup
     0.29%  libc.so.6                      [.] _int_malloc
     0.20%  libfoo.so                      [.] something_else
     0.51%  [JIT] tid 30732                [.] 0x00007ffb1b3c409e
     1.42%  libtorch_cpu.so                [.] fbgemm::FindMinMax
"""


def test_samples_are_grouped_by_what_the_code_does():
    bench = load_bench("decode_perf.py")
    shares = bench.grouped(REPORT)
    # a kernel made at run time (oneDNN's int8 GEMMs) counts as GEMM; the activations' min / max as int8's own
    assert shares[bench.GEMM] == pytest.approx(29.50 + 0.51)
    assert shares["int8: quantizing activations"] == pytest.approx(1.42)
    assert shares["GEMV (one-query attention products)"] == pytest.approx(10.96)
    # CTranslate2's softmax<...> is a softmax, not the top-k's max<...>
    assert shares["softmax / log-softmax"] == pytest.approx(2.65 + 1.16)
    assert shares["top-k / max"] == pytest.approx(0.51)
    assert shares[bench.PYTHON] == pytest.approx(2.25)
    assert shares["copies"] == pytest.approx(2.14)
    assert shares[bench.KERNEL] == pytest.approx(0.52)
    assert shares[bench.TORCH] == pytest.approx(0.33)
    assert shares["malloc / free"] == pytest.approx(0.29)
    assert shares[bench.OTHER] == pytest.approx(0.20)
    assert sum(shares.values()) == pytest.approx(sum(float(line.split("%")[0]) for line in REPORT.splitlines()[1:]))


def test_a_tiny_search_is_sampled_end_to_end(capsys):
    bench = load_bench("decode_perf.py")
    why = bench.perf_usable()
    if why:
        pytest.skip(why)
    threads = torch.get_num_threads()
    try:
        figures = bench.main(["--engines", "seqxduce", "--size", "tiny", "--sources", "2", "--src-len", "5",
                              "--out-len", "4", "--seconds", "1", "--frequency", "499"])
    finally:
        torch.set_num_threads(threads)
    seqxduce = figures["seqxduce"]
    groups = {g: ms for g, ms in seqxduce.items() if g != "CPU per search"}
    # the groups share out the CPU time of a search (perf's percentages of this process's samples)
    assert sum(groups.values()) == pytest.approx(seqxduce["CPU per search"], rel=0.05)
    assert groups.get(bench.PYTHON, 0) > 0  # a tiny search is mostly the interpreter
    assert "ms of CPU per search" in capsys.readouterr().out


def test_without_perf_the_script_says_so_and_exits_2(monkeypatch, capsys):
    bench = load_bench("decode_perf.py")
    monkeypatch.setattr(bench.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit) as stop:
        bench.main(["--engines", "seqxduce", "--size", "tiny"])
    assert stop.value.code == 2 and "perf is not installed" in capsys.readouterr().err
