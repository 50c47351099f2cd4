"""STAND-IN (see torch/__init__.py): a CUDA build."""

cuda = "13.0"
hip = None
git_version = "stand-in"
