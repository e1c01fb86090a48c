"""The API's secret records. A secret's value goes in (`SecretPut`) and never comes out: no
record here has a field for it."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from ..store.models import SecretBindingRow, SecretRow


class SecretPut(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: str = Field(description="write-only: never returned, listed or logged (8 to 8192 bytes)")
    hosts: list[str] = Field(
        max_length=32, description="where it is added: names (api.openai.com) or *.example.com"
    )
    header: str | None = Field(
        None,
        max_length=200,
        description="`Name: template` with {value}; default `Authorization: Bearer {value}`; "
        "with placeholder_only, the bare name of the header the placeholder is replaced in "
        "(default Authorization)",
    )
    placeholder_only: bool = Field(
        False, description="add no header: only replace the placeholder in the header named"
    )


class Secret(BaseModel):
    id: str
    name: str
    hosts: list[str]
    header: str | None = Field(
        description="the header it sets; placeholder only: the header its placeholder goes in "
        "(null: Authorization)"
    )
    placeholder_only: bool
    version: int = Field(description="1, then one more at each rotation")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: SecretRow) -> Secret:
        header = (
            row.header if row.placeholder_only else (row.header or "Authorization: Bearer {value}")
        )
        return cls(
            id=row.id,
            name=row.name,
            hosts=list(row.hosts),
            header=header,
            placeholder_only=row.placeholder_only,
            version=row.version,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


class SecretList(BaseModel):
    secrets: list[Secret]


class BindingPut(BaseModel):
    model_config = ConfigDict(extra="forbid")
    env: str | None = Field(
        None, max_length=128, description="the environment variable that holds the placeholder"
    )


class SecretBinding(BaseModel):
    secret: str = Field(description="the secret's name")
    computer: str = Field(description="the computer's id")
    env: str | None
    placeholder: str = Field(description="what the computer holds instead of the value")
    created_at: datetime

    @classmethod
    def of(cls, binding: SecretBindingRow, secret: SecretRow) -> SecretBinding:
        return cls(
            secret=secret.name,
            computer=binding.computer_id,
            env=binding.env,
            placeholder=binding.placeholder,
            created_at=binding.created_at,
        )


class SecretBindingList(BaseModel):
    bindings: list[SecretBinding]


class SecretRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=63)
    env: str | None = Field(None, max_length=128)
