"""One `up` or `down` at a time on a state directory: a second one waits for the first, saying so.
Two at once each launched the stores (both saw none running, both passed the port checks), the
second pid file hid the first process, and the next `up` found the ports taken."""

from __future__ import annotations

import os
import threading
import time

from infra.stack import Stack
from infra.state_lock import stack_lock


def test_a_second_up_waits_for_the_one_running(settings, tmp_path):
    ours = settings.model_copy(update={"state_dir": tmp_path / "state", "environment": "development"})
    said: list[str] = []
    outcome: list[dict] = []
    with stack_lock(ours.state_dir):
        second = threading.Thread(target=lambda: outcome.append(Stack(ours, names=[]).up(on_progress=said.append)))
        second.start()
        deadline = time.monotonic() + 10
        while not any("waiting for" in m for m in said) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert any(f"another lambdactl up or down on {ours.state_dir} (pid {os.getpid()})" in m for m in said), said
        assert not (ours.state_dir / "settings.json").exists(), "it waits before it changes anything"
    second.join(timeout=30)
    assert outcome == [{}]
    assert (ours.state_dir / "settings.json").exists()


def test_a_state_directory_another_user_made_first_is_refused_before_anything_is_written(
    settings, tmp_path, monkeypatch
):
    """Another local user could make the state directory first (open to all) and plant files in it:
    a lock file linked to the operator's own files (truncated, then overwritten with a pid), or a
    class on a store's classpath. It was accepted until a settings file existed in it."""
    import pytest

    from definitions.files import state_lock
    from definitions.settings_store import SettingsConflict, load

    if os.geteuid() != 0:
        pytest.skip("making a folder another user's needs root")
    state = tmp_path / "state"
    state.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("the operator's own file")
    (state / "stack.lock").symlink_to(victim)
    os.chown(state, 12_345, 12_345)
    state.chmod(0o777)
    ours = settings.model_copy(update={"state_dir": state, "environment": "development"})
    with pytest.raises(Exception, match="belongs to another user") as refused:
        Stack(ours, names=[]).up()
    assert str(state) in str(refused.value)
    with pytest.raises(Exception, match="belongs to another user"), state_lock(state, "views.lock", "views apply"):
        pass
    assert victim.read_text() == "the operator's own file", "nothing was written through its lock"
    assert sorted(p.name for p in state.iterdir()) == ["stack.lock"], "nothing was made in it"
    monkeypatch.setenv("LAMBDA_STATE_DIR", str(state))
    with pytest.raises(SettingsConflict, match="belongs to another user"):
        load()


def test_an_own_state_directory_open_to_all_is_refused_not_mended_then_used(settings, tmp_path):
    """Closing it (chmod o-w) and then opening a lock file in it followed what another user had put
    there meanwhile: a link to the operator's own file, truncated and overwritten with a pid."""
    import pytest

    from definitions.files import state_lock

    state = tmp_path / "state"
    state.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("the operator's own file")
    (state / "settings.lock").symlink_to(victim)
    state.chmod(0o777)
    with pytest.raises(Exception, match="can be changed by every user"), state_lock(state, "settings.lock", "a write"):
        pass
    assert victim.read_text() == "the operator's own file"
    state.chmod(0o700)  # the operator closed it; the link is still there: not followed either
    with pytest.raises(OSError), state_lock(state, "settings.lock", "a write"):
        pass
    assert victim.read_text() == "the operator's own file"


def test_a_folder_reached_through_a_link_in_an_open_folder_is_refused(tmp_path):
    """Whoever can change the folder a link sits in can point it elsewhere: the folders above the path
    as written count, not only those above where it leads."""
    from definitions.files import open_to_others

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # open to all, not sticky
    real = tmp_path / "real"
    (real / "state").mkdir(parents=True)
    (shared / "link").symlink_to(real)
    problem = open_to_others(shared / "link" / "state", ancestors=True)
    assert problem is not None and "shared" in problem and "every user" in problem, problem
