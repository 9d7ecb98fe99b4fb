"""Which result store an Amber's home has, as the settings say: its local folder (`storage.py`) or a bucket on S3
(`s3_store.py`, loaded only then)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from amber_pipeline import settings
from amber_pipeline.errors import AmberError
from amber_pipeline.warehouse.storage import LocalStore


@dataclass(frozen=True)
class Location:
    """Where results are stored, as the settings say: AMBER_STORAGE_URL and AMBER_S3_ENDPOINT."""

    url: str | None
    endpoint: str | None

    @classmethod
    def configured(cls) -> Location:
        return cls(settings.storage_url(), settings.s3_endpoint())


def store(home: Path) -> LocalStore:
    """The result store of the Amber whose home is ``home``, as the settings say now."""
    return opened(home, Location.configured())


@functools.lru_cache(maxsize=16)
def opened(home: Path, location: Location) -> LocalStore:
    """The store at ``location``: a store of S3 is checked to answer the first time it is opened in a process."""
    url = location.url
    if url is None:
        return LocalStore(home)
    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        return LocalStore(home, Path(parts.path if parts.scheme else url).expanduser().resolve())
    if parts.scheme != "s3" or not parts.netloc:
        raise AmberError(f"AMBER_STORAGE_URL {url!r} is neither a folder nor s3://bucket/prefix: set it to one of "
                         "those, or unset it to keep results under AMBER_HOME.")
    from amber_pipeline.warehouse import s3_store  # Arrow's S3 client, loaded only for a store on S3

    return s3_store.opened(home, url, location.endpoint)
