"""Screen coordinate conventions (embodia.devices.coords): exact pixel round trips, HiDPI, model image space, errors."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embodia.devices.coords import SPACES, bounds_center, convert, element_point, from_pixels, to_logical, to_pixels
from embodia.devices.embodiment import Screen

SCREENS = [Screen(1, 1), Screen(2, 3), Screen(7, 1000), Screen(320, 480), Screen(1001, 999), Screen(1080, 2400),
           Screen(1280, 800), Screen(1920, 1080), Screen(2560, 1600), Screen(3840, 2160)]
DETERMINISTIC = settings(derandomize=True, deadline=None, database=None, max_examples=400)


@st.composite
def screen_and_pixel(draw):
    screen = draw(st.sampled_from(SCREENS) | st.builds(Screen, st.integers(1, 8000), st.integers(1, 8000)))
    return screen, (draw(st.integers(0, screen.width - 1)), draw(st.integers(0, screen.height - 1)))


@DETERMINISTIC
@given(screen_and_pixel())
def test_pixel_to_norm1000_and_back_is_exact(case):
    screen, px = case
    norm = from_pixels(px, screen)
    assert all(0 <= c <= 1000 for c in norm)
    assert to_pixels(norm, screen) == px
    assert convert(convert(px, "screen_px", "norm1000", screen=screen), "norm1000", "screen_px", screen=screen) == px


@pytest.mark.parametrize("screen", [Screen(37, 23), Screen(1000, 3), Screen(999, 1)], ids=str)
def test_every_pixel_of_small_screens_round_trips(screen):
    for x in range(screen.width):
        for y in range(screen.height):
            assert to_pixels(from_pixels((x, y), screen), screen) == (x, y)


def test_a_screen_given_as_a_size_tuple_behaves_like_a_screen():
    assert to_pixels((500, 500), (1080, 2400)) == to_pixels((500, 500), Screen(1080, 2400)) == (540, 1200)
    assert convert((3, 4), "screen_px", "norm1000", screen=(1080, 2400)) == \
        convert((3, 4), "screen_px", "norm1000", screen=Screen(1080, 2400))


def test_hidpi_logical_pixels_are_physical_over_the_pixel_ratio():
    retina = Screen(2880, 1800, pixel_ratio=2.0)
    centre = convert((720, 450), "logical_px", "norm1000", screen=retina)
    assert to_pixels(centre, retina) == (1440, 900)
    assert to_logical(centre, retina) == (720, 450)
    assert convert((1000, 1000), "norm1000", "logical_px", screen=retina) == (1439, 899)   # last logical pixel


@DETERMINISTIC
@given(st.integers(0, 1439), st.integers(0, 899))
def test_hidpi_logical_round_trip_is_exact_at_ratio_2(lx, ly):
    retina = Screen(2880, 1800, pixel_ratio=2.0)
    norm = convert((lx, ly), "logical_px", "norm1000", screen=retina)
    assert all(0 <= c <= 1000 for c in norm)
    assert convert(norm, "norm1000", "logical_px", screen=retina) == (lx, ly)
    assert to_logical(norm, retina) == (lx, ly)
    assert to_pixels(norm, retina) == (2 * lx, 2 * ly)


def test_pixel_ratio_1_makes_logical_and_physical_pixels_equal():
    s = Screen(1280, 800)
    for p in [(0, 0), (639, 400), (1279, 799)]:
        assert convert(p, "logical_px", "screen_px", screen=s) == p


def test_image_px_is_the_resized_model_input():
    phone = Screen(1080, 2400)
    image = (540, 1200)           # what the model saw: half size
    assert convert((640, 360), "image_px", "norm1000", image=(1280, 720)) == (500.0, 500.0)
    assert convert((270, 600), "image_px", "norm1000", image=image) == (500.0, 500.0)
    assert convert((270, 600), "image_px", "screen_px", image=image, screen=phone) == (540, 1200)
    assert convert((540, 1200), "image_px", "screen_px", image=image, screen=phone) == (1079, 2399)  # far edge
    assert convert((500, 500), "norm1000", "image_px", image=image) == (270.0, 600.0)


@DETERMINISTIC
@given(st.floats(0, 1000), st.floats(0, 1000), st.integers(28, 4000), st.integers(28, 4000))
def test_norm1000_through_image_px_and_unit_round_trips(x, y, iw, ih):
    p = convert(convert((x, y), "norm1000", "image_px", image=(iw, ih)), "image_px", "norm1000", image=(iw, ih))
    assert p == pytest.approx((x, y), abs=1e-9)
    assert convert(convert((x, y), "norm1000", "unit"), "unit", "norm1000") == pytest.approx((x, y), abs=1e-9)


def test_pixel_cells_are_clamped_to_the_screen_but_continuous_values_are_not():
    s = Screen(1280, 800)
    assert to_pixels((1000, 1000), s) == (1279, 799)
    assert to_pixels((0, 0), s) == (0, 0)
    assert to_pixels((-5, 1200), s) == (0, 799)
    assert convert((1000, 1000), "norm1000", "screen_px", screen=s) == (1279, 799)
    assert convert((1.5, -0.2), "unit", "screen_px", screen=s) == (1279, 0)
    assert from_pixels((-3, 810), s) == (0.0, 1000.0)
    # an off-screen pixel stays off-screen in continuous spaces, so the reply validator can refuse it
    off = convert((1280, 0), "screen_px", "norm1000", screen=s)
    assert off[0] > 1000
    assert convert((-1, 0), "image_px", "norm1000", image=(100, 100))[0] < 0


def test_pixel_outputs_are_ints_and_continuous_outputs_floats():
    s = Screen(1080, 2400)
    assert all(type(c) is int for c in convert((500, 500), "norm1000", "screen_px", screen=s))
    assert all(type(c) is int for c in to_pixels((500.7, 3), s))
    assert all(type(c) is float for c in convert((3, 4), "screen_px", "norm1000", screen=s))


def test_element_centres():
    s = Screen(1080, 2400)
    assert bounds_center([0, 0, 1080, 2400]) == (540.0, 1200.0)
    assert element_point([0, 0, 1080, 2400], s) == (500.0, 500.0)
    assert element_point([10, 20, 11, 21], s) == pytest.approx(from_pixels((10, 20), s))   # a one-pixel element
    assert element_point([-50, -50, 5000, 5000], s) == (1000.0, 1000.0)                   # clamped to the screen


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_refused(bad):
    s = Screen(1080, 2400)
    with pytest.raises(ValueError, match="not a finite number"):
        to_pixels((bad, 5), s)
    with pytest.raises(ValueError, match="not a finite number"):
        from_pixels((5, bad), s)
    for src in SPACES:
        with pytest.raises(ValueError, match="not a finite number"):
            convert((bad, 5), src, "norm1000", screen=s, image=(540, 1200))


def test_unknown_spaces_and_missing_sizes_are_refused():
    with pytest.raises(ValueError, match="unknown coordinate space 'pixels'"):
        convert((1, 2), "pixels", "norm1000")
    with pytest.raises(ValueError, match="unknown coordinate space 'norm'"):
        convert((1, 2), "norm1000", "norm")
    with pytest.raises(ValueError, match="needs screen="):
        convert((1, 2), "screen_px", "norm1000")
    with pytest.raises(ValueError, match="needs screen="):
        convert((1, 2), "norm1000", "logical_px")
    with pytest.raises(ValueError, match="needs image="):
        convert((1, 2), "image_px", "norm1000", screen=Screen(10, 10))
