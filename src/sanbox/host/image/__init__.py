"""Images: kernel, initramfs and root disk built from a template's recipe, cached by hash."""

from .builder import STEPS, BuildProgress, ImageBuilder
from .errors import BuildStepError, ImageError, ImageNotFoundError, UnknownTemplateError
from .image import (
    Image,
    allocated_bytes,
    find_build,
    find_image,
    is_current,
    list_builds,
    remove_build,
)
from .recipe import RECIPES, Recipe, recipe_for

__all__ = [
    "RECIPES",
    "STEPS",
    "BuildProgress",
    "BuildStepError",
    "Image",
    "ImageBuilder",
    "ImageError",
    "ImageNotFoundError",
    "Recipe",
    "UnknownTemplateError",
    "allocated_bytes",
    "find_build",
    "find_image",
    "is_current",
    "list_builds",
    "recipe_for",
    "remove_build",
]
