"""What the tests share: the app under AppTest, the app in Chromium, a fake OpenAI server, a PostgreSQL cluster,
the paths."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
