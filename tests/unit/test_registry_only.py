"""The check between a fetcher's resolution and its download: every npm lockfile entry a registry
tarball (or bundled in one), every pip report item found on the index; anything else refused,
naming the package, the dependency and its spec."""

from __future__ import annotations

import pytest

from sanbox.templates.fetch_common import FetchError
from sanbox.templates.registry_only import check_npm_lock, check_pip_report, registry_tarball

pytestmark = pytest.mark.unit

REGISTRIES = frozenset({"registry.npmjs.org"})
TGZ = "https://registry.npmjs.org/a/-/a-1.0.0.tgz"


def lock(**packages: object) -> dict[str, object]:
    return {"lockfileVersion": 3, "packages": {"": {"dependencies": {"a": "^1"}}, **packages}}


def test_registry_tarballs_and_bundled_packages_pass() -> None:
    ok = lock(
        **{
            "node_modules/a": {"resolved": TGZ, "dependencies": {"b": "^2"}},
            "node_modules/a/node_modules/b": {"inBundle": True},
        }
    )
    assert check_npm_lock(ok, REGISTRIES) == 2


@pytest.mark.parametrize(
    "url",
    [
        "file:../../srv/x.tgz",
        "git+file:///srv/repo#abc",
        "git+ssh://git@github.com/u/r.git#abc",
        "https://attacker.example/a/-/a-1.0.0.tgz",
        "https://user:pw@registry.npmjs.org/a/-/a-1.0.0.tgz",
        "https://registry.npmjs.org/a",
        None,
    ],
)
def test_a_dependency_from_anywhere_else_is_refused_naming_it(url: str | None) -> None:
    bad = lock(
        **{
            "node_modules/a": {"resolved": TGZ, "dependencies": {"x": "file:/srv/x.tgz"}},
            "node_modules/a/node_modules/x": {"resolved": url} if url else {},
        }
    )
    with pytest.raises(FetchError, match="'a' depends on 'x' from 'file:/srv/x.tgz'"):
        check_npm_lock(bad, REGISTRIES)
    assert not registry_tarball(url, REGISTRIES)


def test_a_link_is_refused_even_to_a_registry_looking_path() -> None:
    bad = lock(**{"node_modules/a": {"resolved": TGZ, "link": True}})
    with pytest.raises(FetchError, match="'the step' depends on 'a'"):
        check_npm_lock(bad, REGISTRIES)
    with pytest.raises(FetchError, match="not a lockfile"):
        check_npm_lock({"dependencies": {}}, REGISTRIES)


def test_pip_pins_what_the_index_gave_and_refuses_a_direct_reference() -> None:
    item = {"is_direct": False, "metadata": {"name": "six", "version": "1.17.0"}}
    assert check_pip_report({"install": [item]}) == ["six==1.17.0"]
    direct = {
        "is_direct": True,
        "download_info": {"url": "file:///etc/x.whl"},
        "metadata": {"name": "x", "version": "1"},
    }
    with pytest.raises(FetchError, match="'x' is a direct reference \\('file:///etc/x.whl'\\)"):
        check_pip_report({"install": [item, direct]})
    with pytest.raises(FetchError, match="direct reference"):
        check_pip_report({"install": [{"metadata": {"name": "y", "version": "1"}}]})
