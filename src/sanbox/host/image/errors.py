"""Errors of image builds and lookups.

HostError
└── ImageError
    ├── ImageNotFoundError     no built image for a template
    └── BuildStepError         a step of the build failed (which step, and why)
MissingToolError (host.errors) a program the build needs is not installed
"""

from __future__ import annotations

from ..errors import HostError


class ImageError(HostError):
    code = "image_error"


class ImageNotFoundError(ImageError):
    code = "image_not_found"

    def __init__(self, template: str) -> None:
        super().__init__(
            f"no image built for template {template!r}: run `sanbox image build {template}`"
        )
        self.template = template


class BuildStepError(ImageError):
    code = "image_build_failed"

    def __init__(self, step: str, detail: str, hint: str = "") -> None:
        message = f"image build failed at step {step!r}: {detail}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)
        self.step = step
        self.detail = detail


class UnknownTemplateError(ImageError):
    code = "template_not_found"
