"""bench/decode_perf.py groups perf's samples by what the sampled code does, for both engines alike (no timing
thresholds)."""

import pytest
import torch

from tests.bench_scripts import load_bench

# perf report lines as they come from real runs (torch 2.13 CPU, CTranslate2 4.8.5); columns trimmed
REPORT = """\
# Overhead  Samples  Shared Object  Symbol
    29.50%   2950  libtorch_cpu.so                [.] mkl_blas_avx512_sgemm_kernel_0
    10.96%   1096  libtorch_cpu.so                [.] mkl_blas_avx512_xsgemv
     2.65%    265  libtorch_cpu.so                [.] at::native::AVX512::serial_vec_log_softmax_lastdim_range<float>
     2.25%    225  libpython3.11.so.1.0           [.] _PyEval_EvalFrameDefault
     2.14%    214  libc.so.6                      [.] __memmove_avx512_unaligned_erms
     1.16%    116  libctranslate2.so.4.8.5  [.] ctranslate2::cpu::softmax<(ctranslate2::cpu::CpuIsa)2>(float const*)
     0.51%     51  libctranslate2.so.4.8.5        [.] ctranslate2::cpu::max<(ctranslate2::cpu::CpuIsa)2, float>
     0.52%     52  [kernel.kallsyms]              [k] exc_page_fault
     0.33%     33  libtorch_cpu.so                [.] c10::impl::OperatorEntry::lookup
     0.29%     29  libc.so.6                      [.] _int_malloc
     0.20%     20  libfoo.so                      [.] something_else
     0.51%     51  [JIT] tid 30732                [.] 0x00007ffb1b3c409e
     1.42%    142  libtorch_cpu.so                [.] fbgemm::FindMinMax
"""


def test_samples_are_grouped_by_what_the_code_does():
    bench = load_bench("decode_perf.py")
    shares = bench.grouped(REPORT)
    total = 5244  # the samples of REPORT's lines

    def share(*samples: int) -> float:
        return pytest.approx(100 * sum(samples) / total)

    # a kernel made at run time (oneDNN's int8 GEMMs) counts as GEMM; the activations' min / max as int8's own
    assert shares[bench.GEMM] == share(2950, 51)
    assert shares["int8: quantizing activations"] == share(142)
    assert shares["GEMV (one-query attention products)"] == share(1096)
    # CTranslate2's softmax<...> is a softmax, not the top-k's max<...>
    assert shares["softmax / log-softmax"] == share(265, 116)
    assert shares["top-k / max"] == share(51)
    assert shares[bench.PYTHON] == share(225)
    assert shares["copies"] == share(214)
    assert shares[bench.KERNEL] == share(52)
    assert shares[bench.TORCH] == share(33)
    assert shares["malloc / free"] == share(29)
    assert shares[bench.OTHER] == share(20)


def test_shares_come_from_the_sample_counts_not_the_rounded_percentages():
    bench = load_bench("decode_perf.py")
    # perf prints each percentage rounded to 0.01: many small entries add up to more than 100
    report = "\n".join(["    50.00%   5000  libtorch_cpu.so  [.] mkl_blas_avx512_sgemm_kernel_0"]
                       + [f"     0.01%      4  libpython3.11.so.1.0  [.] f{i}" for i in range(1250)])
    shares = bench.grouped(report)
    assert sum(shares.values()) == pytest.approx(100.0)
    assert shares[bench.GEMM] == pytest.approx(50.0) and shares[bench.PYTHON] == pytest.approx(50.0)


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


def test_lines_padded_to_the_widest_symbol_are_read():
    bench = load_bench("decode_perf.py")
    # perf pads every line to the widest symbol (C++ templates: thousands of characters); with run-time kernels
    # there are thousands of such lines, which a pattern rescanning the blanks took minutes over
    pad = " " * 2000
    report = "\n".join([f"     0.03%      3  [JIT] tid 30732  [.] 0x00007ffb1b3c{i:04x}{pad}" for i in range(50)]
                       + [f"     0.03%      150  libtorch_cpu.so  [.] fbgemm::FindMinMax{pad}"])
    shares = bench.grouped(report)
    assert shares == {bench.GEMM: pytest.approx(50.0), "int8: quantizing activations": pytest.approx(50.0)}
