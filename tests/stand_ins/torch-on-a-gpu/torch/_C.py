"""STAND-IN (see torch/__init__.py): the compiled arch list, as torch._C reports it."""


def _cuda_getArchFlags():
    return "sm_80 sm_90 sm_100 sm_120"
