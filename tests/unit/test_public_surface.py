"""The public names are a contract: changing them is deliberate (as httpx pins its own)."""

import pytest

import sanbox
import sanbox.host.agent
import sanbox.sdk

pytestmark = pytest.mark.unit


def test_top_level() -> None:
    assert sorted(sanbox.__all__) == ["AsyncSanbox", "Sanbox", "__version__"]
    assert sanbox.Sanbox is sanbox.sdk.Sanbox and sanbox.AsyncSanbox is sanbox.sdk.AsyncSanbox


@pytest.mark.parametrize("module", [sanbox.sdk, sanbox.host.agent])
def test_every_exported_name_exists_and_is_listed_once(module: object) -> None:
    names = module.__all__  # type: ignore[attr-defined]
    assert len(names) == len(set(names))
    for name in names:
        assert getattr(module, name) is not None, name


def test_sdk_errors_and_handles() -> None:
    expected = ["Sanbox", "AsyncSanbox", "Computer", "SanboxError", "ComputerNotRunningError"]
    expected += ["InvalidPathError", "AuthenticationError", "PublishedPort", "ExecResult"]
    expected += ["ViewLink"]
    expected += ["Secret", "SecretBinding", "Secrets", "AsyncSecrets", "SecretNotFoundError"]
    expected += ["InvalidSecretError", "BindingNotFoundError"]
    for name in expected:
        assert name in sanbox.sdk.__all__
    assert issubclass(sanbox.sdk.ComputerNotRunningError, sanbox.sdk.SanboxError)
    assert issubclass(sanbox.sdk.InvalidSecretError, sanbox.sdk.InvalidRequestError)
