"""One exception family: every exception class the package defines derives from
``streamscale.Error``, and keeps the standard base a caller expects."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import streamscale
from streamscale import errors


def _modules() -> list[str]:
    return [
        info.name
        for info in pkgutil.walk_packages(streamscale.__path__, prefix="streamscale.")
        if not info.name.endswith("__main__")
    ]


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for name in _modules():
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == name and issubclass(obj, BaseException):
                found.append(obj)
    return found


def test_every_exception_class_is_a_streamscale_error() -> None:
    classes = _exception_classes()
    assert len(classes) >= 20  # all modules were walked
    outside = [
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, errors.Error)
    ]
    assert outside == []


def test_the_family_is_exported_at_the_top() -> None:
    assert streamscale.Error is errors.Error
    for name in ("ConfigError", "RecordError", "KafkaRequestError", "LaunchError"):
        assert getattr(streamscale, name) is getattr(errors, name)


@pytest.mark.parametrize(
    ("cls", "standard"),
    [
        (errors.ConfigError, ValueError),
        (errors.RecordError, ValueError),
        (errors.KafkaRequestError, RuntimeError),
        (errors.LaunchError, RuntimeError),
        (errors.ScalingError, RuntimeError),
        (errors.PipelineError, RuntimeError),
    ],
)
def test_each_concern_keeps_its_standard_base(cls: type[Exception], standard: type) -> None:
    assert issubclass(cls, errors.Error)
    assert issubclass(cls, standard)


def test_no_name_shadows_confluent_kafkas() -> None:
    import confluent_kafka

    ours = {c.__name__ for c in _exception_classes()}
    theirs = {n for n, o in vars(confluent_kafka).items() if inspect.isclass(o)}
    assert ours & theirs == set()


def test_options_and_bounds_are_config_errors() -> None:
    from streamscale.autoscale.runtime import AutoscaleOptions
    from streamscale.kafka.options import OptionError

    with pytest.raises(streamscale.Error):
        AutoscaleOptions(min_executors=0)
    assert issubclass(OptionError, streamscale.ConfigError)
