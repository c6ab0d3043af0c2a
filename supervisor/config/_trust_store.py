"""``TrustStore``: the project files the user trusted, in ``$SUBVISOR_HOME/trusted.json`` (S-SEC-3).

Trust is bound to a file's exact content and to where it acts: each entry
holds the file's path as found (its directory resolved, the file itself
not, so a symlink is trusted only under its own name, never as its
target), the directory its commands run in (a relative ``server.py`` means
another script elsewhere), and the sha256 of the bytes the user was shown;
any change to one of them asks again. The store lives in the user's home,
never in a project, and is written atomically with mode 0600.

Entries of version 1 were keyed by the resolved path alone; they are
dropped on reading, so those files ask again rather than match in another
context.

Race, handled by failing closed: two processes granting at once each
rewrite the whole file, so the later write wins and the other grant is
lost; a lost grant only means that file asks again.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..files._atomic_write import write_atomically
from ._errors import ConfigError

__all__ = ["TRUST_FILE", "TrustEntry", "TrustStore", "content_digest", "trust_path"]

TRUST_FILE = "trusted.json"
_VERSION = 2


def content_digest(content: bytes) -> str:
    """The sha256 (hex) that trust is bound to."""
    return hashlib.sha256(content).hexdigest()


def trust_path(path: Path) -> Path:
    """``path`` as trust names it: absolute, its directory resolved, the file itself not."""
    path = path.absolute()
    return path.parent.resolve() / path.name


@dataclass(frozen=True, slots=True)
class TrustEntry:
    """One trusted file (see ``trust_path``), the directory it runs in, its digest, and when."""

    path: Path
    workdir: Path
    sha256: str
    trusted_at: float


class TrustStore:
    """The trusted files of the user whose home is ``home``."""

    def __init__(self, home: Path) -> None:
        self.path = home / TRUST_FILE

    def entries(self) -> list[TrustEntry]:
        """Every trusted file, by path and directory."""
        return sorted(
            self._load().values(), key=lambda entry: (str(entry.path), str(entry.workdir))
        )

    def digest_of(self, path: Path, workdir: Path) -> str | None:
        """The digest trusted for the file at ``path`` run in ``workdir``, or None."""
        entry = self._load().get(_key(path, workdir))
        return entry.sha256 if entry is not None else None

    def grant(self, path: Path, workdir: Path, digest: str) -> None:
        """Trust ``path``'s content whose digest is ``digest`` (and no other), in ``workdir``."""
        entries = self._load()
        key = _key(path, workdir)
        entries[key] = TrustEntry(Path(key[0]), Path(key[1]), digest, time.time())
        self._save(entries)

    def revoke(self, path: Path) -> bool:
        """Forget ``path`` in every directory; False if it was not trusted."""
        entries = self._load()
        name = str(trust_path(path))
        kept = {key: entry for key, entry in entries.items() if key[0] != name}
        if len(kept) == len(entries):
            return False
        self._save(kept)
        return True

    def _load(self) -> dict[tuple[str, str], TrustEntry]:
        try:
            document = json.loads(self.path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError) as exc:
            raise self._damaged(str(exc)) from None
        if not isinstance(document, dict):
            raise self._damaged(f'expected {{"version": {_VERSION}, "files": [...]}}')
        if document.get("version") == 1:
            return {}  # keyed without the directory: asked again (module doc)
        files = document.get("files")
        if document.get("version") != _VERSION or not isinstance(files, list):
            raise self._damaged(f'expected {{"version": {_VERSION}, "files": [...]}}')
        entries: dict[tuple[str, str], TrustEntry] = {}
        for value in files:
            fields = value if isinstance(value, dict) else {}
            path, workdir, digest = (fields.get(name) for name in ("path", "workdir", "sha256"))
            if not (isinstance(path, str) and isinstance(workdir, str) and isinstance(digest, str)):
                raise self._damaged(f"entry {value!r} lacks path, workdir or sha256")
            trusted_at = fields.get("trusted_at", 0.0)
            entries[path, workdir] = TrustEntry(
                Path(path),
                Path(workdir),
                digest,
                float(trusted_at) if _is_number(trusted_at) else 0.0,
            )
        return entries

    def _save(self, entries: dict[tuple[str, str], TrustEntry]) -> None:
        document = {
            "version": _VERSION,
            "files": [
                {
                    "path": key[0],
                    "workdir": key[1],
                    "sha256": entry.sha256,
                    "trusted_at": entry.trusted_at,
                }
                for key, entry in sorted(entries.items())
            ],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomically(self.path, json.dumps(document, indent=2) + "\n", mode=0o600)

    def _damaged(self, why: str) -> ConfigError:
        return ConfigError(
            f"cannot read {self.path} ({why}): delete it to start over (every project file"
            " you trusted will ask again)"
        )


def _key(path: Path, workdir: Path) -> tuple[str, str]:
    return str(trust_path(path)), str(workdir.absolute())


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
