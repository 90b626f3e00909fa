"""The many-replica deploy: the nginx config the README gives is the one the replica tests run, and nginx takes it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support import ROOT
from tests.support.replicas import NGINX, nginx_config, site_config


def test_the_readme_gives_the_nginx_config_the_tests_run() -> None:
    readme = (ROOT / "README.md").read_text()
    assert f"```nginx\n{site_config()}```" in readme


def test_nginx_accepts_the_config(tmp_path: Path) -> None:
    conf = tmp_path / "nginx.conf"
    conf.write_text(nginx_config(tmp_path, 8080, (8501, 8502, 8503)))
    checked = subprocess.run([NGINX, "-t", "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "error.log")],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert "syntax is ok" in checked.stderr
