"""core.shadow: a method shadowed on one object while held, the object as it was after."""

from __future__ import annotations

from typing import Any

from otel_handoff.core.shadow import Shadows, original


class Sender:
    def speak(self) -> str:
        return "class"


def ours(obj: Any) -> Any:
    def make(previous: Any) -> Any:
        return lambda: "ours, then " + original(obj, "speak", previous)()

    return make


def test_held_twice_the_shadow_stays_until_the_last_release() -> None:
    shadows, sender, other = Shadows(), Sender(), Sender()
    shadows.hold(sender, "speak", ours(sender))
    shadows.hold(sender, "speak", ours(sender))
    assert sender.speak() == "ours, then class" and other.speak() == "class"  # that one object only
    shadows.release(sender, "speak")
    assert sender.speak() == "ours, then class"
    shadows.release(sender, "speak")
    assert "speak" not in vars(sender) and sender.speak() == "class"
    shadows.release(sender, "speak")  # one too many: nothing
    assert "speak" not in vars(sender)


def test_the_apps_own_attribute_is_called_and_comes_back() -> None:
    shadows, sender = Shadows(), Sender()
    sender.speak = lambda: "app"  # type: ignore[method-assign]
    apps = sender.speak
    shadows.hold(sender, "speak", ours(sender))
    assert sender.speak() == "ours, then app"
    shadows.release(sender, "speak")
    assert sender.speak is apps


def test_an_attribute_the_app_set_meanwhile_stays() -> None:
    shadows, sender = Shadows(), Sender()
    shadows.hold(sender, "speak", ours(sender))
    sender.speak = lambda: "app, later"  # type: ignore[method-assign]
    shadows.release(sender, "speak")
    assert sender.speak() == "app, later"


def test_the_class_method_is_looked_up_when_called() -> None:
    shadows, sender = Shadows(), Sender()
    shadows.hold(sender, "speak", ours(sender))
    patched = Sender.speak
    try:
        Sender.speak = lambda self: "patched class"  # type: ignore[method-assign]
        assert sender.speak() == "ours, then patched class"  # another's patch of the class holds
    finally:
        Sender.speak = patched  # type: ignore[method-assign]
        shadows.clear()


def test_clear_removes_every_shadow_whatever_holds_it() -> None:
    shadows, first, second = Shadows(), Sender(), Sender()
    for sender in (first, second, first):
        shadows.hold(sender, "speak", ours(sender))
    shadows.clear()
    assert "speak" not in vars(first) and "speak" not in vars(second)
    shadows.release(first, "speak")  # a hold from before: nothing
    assert first.speak() == "class"
