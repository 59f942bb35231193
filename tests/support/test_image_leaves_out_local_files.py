"""What the repository keeps out of git (local environments, data, results of runs) is kept out of the
image too: the Dockerfile copies the whole build context, so anything .dockerignore forgets (the
drill's results, with its scratch database's logs and tickets) is baked into every image."""

from __future__ import annotations

from tests.support.test_configuration import ROOT


def _patterns(name: str) -> set[str]:
    lines = (ROOT / name).read_text().splitlines()
    return {line.strip().rstrip("/") for line in lines if line.strip() and not line.lstrip().startswith("#")}


def test_every_path_git_ignores_is_left_out_of_the_image():
    ignored_by_docker = _patterns(".dockerignore")
    # .dockerignore matches from the context's root; "**/" reaches into every directory, as .gitignore does.
    missing = {p for p in _patterns(".gitignore") if p not in ignored_by_docker and f"**/{p}" not in ignored_by_docker}

    assert not missing, f".dockerignore leaves these in the image: {sorted(missing)}"
