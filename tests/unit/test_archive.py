"""The Debian archive's stamp and the package lists of image builds: pure parsing."""

from __future__ import annotations

import pytest

from sanbox.host.image import archive

pytestmark = pytest.mark.unit

RELEASE = """-----BEGIN PGP SIGNED MESSAGE-----
Hash: SHA256

Origin: Debian
Suite: stable
Codename: bookworm
MD5Sum:
 f230d61720e789abf5df55d6026230c6 50060337 main/binary-amd64/Packages
SHA256:
 0000000000000000000000000000000000000000000000000000000000000000 1 main/binary-all/Packages
 515e692f2c4121c6fcec444ef100cc18f79a991910615f3a88c8b7becfc94d2f 5006 main/binary-amd64/Packages
 1111111111111111111111111111111111111111111111111111111111111111 9 main/binary-amd64/Packages.xz
-----BEGIN PGP SIGNATURE-----
"""


def test_the_stamp_is_the_sha256_of_the_amd64_packages_index() -> None:
    assert (
        archive.index_digest(RELEASE)
        == "515e692f2c4121c6fcec444ef100cc18f79a991910615f3a88c8b7becfc94d2f"
    )
    assert archive.index_digest(RELEASE.replace("SHA256:", "SHA1:")) is None  # MD5 is not used


def test_suites_of_the_recipes_sources() -> None:
    sources = ["deb http://deb.debian.org/debian/ bookworm main", "# not a source", "deb-src x y z"]
    assert archive.suites(sources) == ["http://deb.debian.org/debian/dists/bookworm"]


def test_a_digest_depends_on_every_suite_and_not_on_order() -> None:
    a = archive.digest({"s1": "aa", "s2": "bb"})
    assert a == archive.digest({"s2": "bb", "s1": "aa"})
    assert a != archive.digest({"s1": "aa", "s2": "cc"})


STATUS = """Package: curl
Status: install ok installed
Architecture: amd64
Version: 7.88.1-10+deb12u8
Description: a tool
 with a continuation: line

Package: removed-one
Status: deinstall ok config-files
Version: 1.0

Package: libc6
Status: install ok installed
Architecture: i386
Version: 2.36-9
"""


def test_installed_packages_of_a_dpkg_status_file() -> None:
    assert archive.installed(STATUS) == {"curl": "7.88.1-10+deb12u8", "libc6:i386": "2.36-9"}


def test_a_summary_names_what_changed() -> None:
    before = {"a": "1", "b": "1", "c": "1"}
    after = {"a": "1", "b": "2", "d": "1"}
    assert archive.changes(before, after) == ["b 1 -> 2", "-c 1", "+d 1"]
    assert archive.summary(before, before) == "the same packages"
    many = {f"p{i:02}": "2" for i in range(20)}
    line = archive.summary({}, many)
    assert line.startswith("20 package(s) changed: +p00 2") and line.endswith("and 8 more")
