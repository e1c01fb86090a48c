"""What an image is made of, and the content hash that names a build of it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..settings import HostSettings
from .errors import UnknownTemplateError

ASSETS = Path(__file__).parent / "assets"
GUEST_PACKAGE = Path(__file__).parents[2] / "guest"
BASE_PACKAGES = (
    "python3",
    "iproute2",
    "ca-certificates",
    "curl",
    "git",
    "procps",
    "openssh-server",  # `sanbox ssh`: sshd -i per connection, started by the agent
    "openssh-sftp-server",  # sftp, and scp (which speaks SFTP since OpenSSH 9.0)
    "rsync",
    "e2fsprogs",
    "kmod",
    "less",
    "nano",
)


def default_mirror() -> str:
    return HostSettings.from_env().debian_mirror


@dataclass(frozen=True)
class Recipe:
    """A template's build inputs. Built-in: `base`."""

    name: str
    suite: str = "bookworm"
    packages: tuple[str, ...] = BASE_PACKAGES
    disk_size_gib: int = 8
    kernel_package: str = "linux-image-cloud-amd64"
    mirror: str = field(default_factory=default_mirror)
    # template settings, not image inputs (left out of the build id):
    idle_timeout: int = 1800  # seconds without activity before a computer is suspended
    allow: tuple[str, ...] = ()  # hosts its computers may reach; empty: nothing goes out

    def sources(self) -> list[str]:
        security = self.mirror.rstrip("/").removesuffix("/debian") + "/debian-security"
        return [
            f"deb {self.mirror} {self.suite} main",
            f"deb {self.mirror} {self.suite}-updates main",
            f"deb {security} {self.suite}-security main",
        ]

    def build_id(self, archive: str | None = None) -> str:
        """Content hash of everything that goes into the image: recipe, agent source, assets,
        and the state of the Debian archive it installs from (`archive.digest` of its stamp;
        None for a build made without reading the archive)."""
        h = hashlib.sha256()
        if archive is not None:
            h.update(f"archive:{archive}\n".encode())
        recipe = asdict(self)
        recipe.pop("mirror")  # where packages come from does not change what the image is
        recipe.pop("idle_timeout")
        recipe.pop("allow")
        h.update(json.dumps(recipe, sort_keys=True).encode())
        for root in (ASSETS, GUEST_PACKAGE):
            for path in sorted(root.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    h.update(str(path.relative_to(root)).encode())
                    h.update(path.read_bytes())
        return h.hexdigest()[:16]


RECIPES = {"base": Recipe(name="base")}


def recipe_for(template: str) -> Recipe:
    try:
        return RECIPES[template]
    except KeyError:
        known = ", ".join(sorted(RECIPES))
        raise UnknownTemplateError(
            f"unknown template {template!r}: known templates are {known}"
        ) from None
