"""The Hugging Face Hub side of model_weights, through huggingface_hub (pinned in the role's own venv):
the repository's files with the sizes and hashes the Hub publishes (``HfApi.model_info(...,
files_metadata=True)``: ``lfs.sha256`` for LFS files, the git blob sha1 for the others), the commit a
revision names, each file's resolve URL and the request headers (token, user agent).

The bytes themselves go through ``model_weights.fetch_file``: huggingface_hub >= 1.x downloads into a
temporary file unique to the process and deletes it when the process ends, so a killed download starts
over; ``fetch_file`` keeps a ``.part`` file and resumes it with an HTTP Range request.
"""

from ansible.module_utils.model_weights import (
    WeightsError,
    http_error_message,
    hub_files,
    unreachable_message,
)

try:  # only the role's venv has huggingface_hub; the module says so when it is missing
    import httpx
    from huggingface_hub import HfApi, constants, hf_hub_url
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError
    from huggingface_hub.utils import build_hf_headers
    HUB_IMPORT_ERROR = ""
except ImportError as exc:
    HUB_IMPORT_ERROR = str(exc)


def _status(exc):
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def hub_client(source, token, timeout):
    """(plan, file_url, headers) for a Hub source; raises WeightsError when huggingface_hub is missing."""
    if HUB_IMPORT_ERROR:
        raise WeightsError(f"huggingface_hub is not importable by this Python ({HUB_IMPORT_ERROR}); the "
                           f"model_weights role runs this module with the venv it installs "
                           f"(model_weights_venv)")
    endpoint = source.get("endpoint") or constants.ENDPOINT
    what = f"{source['repo']}@{source['revision']}"

    def plan():
        api = HfApi(endpoint=endpoint, token=token or False)
        try:
            info = api.model_info(source["repo"], revision=source["revision"], files_metadata=True,
                                  timeout=timeout)
        except RevisionNotFoundError:
            raise WeightsError(f"{endpoint} has repository {source['repo']} but no revision "
                               f"{source['revision']!r}: check weights.revision "
                               f"(a commit sha or a tag)") from None
        except RepositoryNotFoundError:
            # the Hub answers 401 RepoNotFound for a missing repository and for one the caller may not
            # see; a refused token is a plain 401 (below)
            raise WeightsError(f"{endpoint} has no repository {source['repo']} (or it is private and "
                               + ("the token has no access to it)" if token else
                                  "needs a token: set HF_TOKEN in sglang_service_secrets)")) from None
        except (httpx.ConnectError, httpx.TimeoutException) as exc:
            raise WeightsError(unreachable_message(endpoint, type(exc).__name__ + ": " + str(exc))) from None
        except Exception as exc:  # HfHubHTTPError and the rest: the status, never the token
            status = _status(exc)
            if status:
                raise WeightsError(http_error_message(status, what, endpoint, bool(token))) from None
            raise WeightsError(f"{endpoint}: reading {what} failed: {type(exc).__name__}: {exc}") from None
        siblings = [{"rfilename": s.rfilename, "size": s.size, "blob_id": s.blob_id,
                     "lfs": {"size": s.lfs.size, "sha256": s.lfs.sha256} if s.lfs else None}
                    for s in info.siblings or []]
        if not siblings:
            raise WeightsError(f"{endpoint}: {what} lists no files")
        return info.sha or source["revision"], hub_files(siblings)

    def file_url(commit, name):
        return hf_hub_url(source["repo"], name, revision=commit, endpoint=endpoint)

    headers = {k: v for k, v in build_hf_headers(token=token or False).items()}
    return plan, file_url, headers
