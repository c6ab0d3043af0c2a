"""``TrustStore``: the project files the user trusted, in ``$SUBVISOR_HOME/trusted.json`` (S-SEC-3).

Trust is bound to a file's exact content: each entry maps the file's
resolved path to the sha256 of the bytes the user was shown, so any change
to the file asks again. The store lives in the user's home, never in a
project, and is written atomically with mode 0600.

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

__all__ = ["TRUST_FILE", "TrustEntry", "TrustStore", "content_digest"]

TRUST_FILE = "trusted.json"
_VERSION = 1


def content_digest(content: bytes) -> str:
    """The sha256 (hex) that trust is bound to."""
    return hashlib.sha256(content).hexdigest()


@dataclass(frozen=True, slots=True)
class TrustEntry:
    """One trusted file: its resolved path, the digest of the trusted content, and when."""

    path: Path
    sha256: str
    trusted_at: float


class TrustStore:
    """The trusted files of the user whose home is ``home``."""

    def __init__(self, home: Path) -> None:
        self.path = home / TRUST_FILE

    def entries(self) -> list[TrustEntry]:
        """Every trusted file, by path."""
        return sorted(self._load().values(), key=lambda entry: str(entry.path))

    def digest_of(self, path: Path) -> str | None:
        """The digest trusted for the file at ``path``, or None."""
        entry = self._load().get(str(path.resolve()))
        return entry.sha256 if entry is not None else None

    def grant(self, path: Path, digest: str) -> None:
        """Trust the content of ``path`` whose digest is ``digest`` (and no other)."""
        entries = self._load()
        key = str(path.resolve())
        entries[key] = TrustEntry(Path(key), digest, time.time())
        self._save(entries)

    def revoke(self, path: Path) -> bool:
        """Forget ``path``; False if it was not trusted."""
        entries = self._load()
        if entries.pop(str(path.resolve()), None) is None:
            return False
        self._save(entries)
        return True

    def _load(self) -> dict[str, TrustEntry]:
        try:
            document = json.loads(self.path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError) as exc:
            raise self._damaged(str(exc)) from None
        files = document.get("files") if isinstance(document, dict) else None
        if not isinstance(files, dict):
            raise self._damaged('expected {"version": 1, "files": {...}}')
        entries: dict[str, TrustEntry] = {}
        for key, value in files.items():
            digest = value.get("sha256") if isinstance(value, dict) else None
            if not isinstance(digest, str):
                raise self._damaged(f"entry {key!r} has no sha256")
            trusted_at = value.get("trusted_at", 0.0)
            entries[key] = TrustEntry(
                Path(key), digest, float(trusted_at) if _is_number(trusted_at) else 0.0
            )
        return entries

    def _save(self, entries: dict[str, TrustEntry]) -> None:
        document = {
            "version": _VERSION,
            "files": {
                key: {"sha256": entry.sha256, "trusted_at": entry.trusted_at}
                for key, entry in sorted(entries.items())
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomically(self.path, json.dumps(document, indent=2) + "\n", mode=0o600)

    def _damaged(self, why: str) -> ConfigError:
        return ConfigError(
            f"cannot read {self.path} ({why}): delete it to start over (every project file"
            " you trusted will ask again)"
        )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
