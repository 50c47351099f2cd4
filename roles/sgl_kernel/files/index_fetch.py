"""Download one file of a PEP 503 simple index (pypiserver, devpi) and check its sha256.

Usage: index_fetch.py INDEX_URL PROJECT FILENAME SHA256 DEST. Reads <INDEX_URL>/<project>/, finds the
link whose file name is FILENAME (relative links resolved against the page), downloads it next to DEST,
and renames it to DEST only when its sha256 is SHA256. Prints JSON {url, sha256}; on failure exits 1
with one line on stdout saying why (stdout: Ansible's ssh connection runs a script under a terminal,
ssh -tt, which merges stderr into it). Run by the stack's interpreter on each host; standard library only.
"""

import hashlib
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

HREF = re.compile(r"""href\s*=\s*["']([^"']+)["']""", re.IGNORECASE)


def fail(message):
    print(message)
    sys.exit(1)


def main():
    index_url, project, filename, sha256, dest = sys.argv[1:6]
    page_url = f"{index_url.rstrip('/')}/{re.sub(r'[-_.]+', '-', project).lower()}/"
    try:
        with urllib.request.urlopen(page_url, timeout=60) as response:
            page = response.read().decode("utf-8", "replace")
            base = response.geturl()
    except (urllib.error.URLError, OSError) as exc:
        fail(f"cannot read the index page {page_url}: {exc}")
    links = [urllib.parse.urljoin(base, href) for href in HREF.findall(page)]
    matches = [link for link in links
               if urllib.parse.unquote(urllib.parse.urlsplit(link).path).rsplit("/", 1)[-1] == filename]
    if not matches:
        fail(f"{page_url} lists no {filename} (it lists {len(links)} files): was it removed from the index? "
             "Remove the fingerprint's artifact.json from the artifact store to build and upload it again")
    url = urllib.parse.urldefrag(matches[0])[0]
    partial = dest + ".part"
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=600) as response, open(partial, "wb") as out:
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
    except (urllib.error.URLError, OSError) as exc:
        fail(f"cannot download {url}: {exc}")
    if digest.hexdigest() != sha256:
        os.unlink(partial)
        fail(f"{url} has sha256 {digest.hexdigest()}, the artifact store recorded {sha256}: the index holds "
             "another file under this name; remove it from the index and the fingerprint's artifact.json, "
             "then re-run")
    os.replace(partial, dest)
    print(json.dumps({"url": url, "sha256": sha256}))


if __name__ == "__main__":
    main()
