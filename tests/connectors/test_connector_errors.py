"""Every exception class the connectors define derives from ConnectorError, through its package's root."""

import importlib
import inspect
import pkgutil

import windvane.connectors
from windvane.connectors.errors import ConnectorConfigError, ConnectorError

ROOTS = {
    "windvane.connectors.forward": "ForwardError",
    "windvane.connectors.http": "HttpError",
    "windvane.connectors.mqtt": "MqttError",
}


def connector_exceptions() -> dict[str, type]:
    found = {}
    for info in pkgutil.walk_packages(windvane.connectors.__path__, "windvane.connectors."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("windvane.connectors")
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_connector_exception_is_a_connector_error():
    classes = connector_exceptions()
    assert len(classes) > 10
    assert [name for name, cls in classes.items() if not issubclass(cls, ConnectorError)] == []


def test_each_package_has_its_root():
    for package, root in ROOTS.items():
        errors = importlib.import_module(package + ".errors")
        base = getattr(errors, root)
        for cls in vars(errors).values():
            if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == errors.__name__:
                assert issubclass(cls, (base, ConnectorError)), cls


def test_bad_settings_stay_value_errors():
    from windvane.connectors.address import AddressError
    from windvane.connectors.limits import Limits

    assert issubclass(ConnectorConfigError, ValueError) and issubclass(AddressError, ConnectorConfigError)
    try:
        Limits(max_connections=0)
    except ValueError as exc:
        assert isinstance(exc, ConnectorConfigError)
    else:
        raise AssertionError("max_connections=0 was accepted")
