"""memory: the success memory that steers the flow-matching action decoder at test time.

Verified successful episodes are cut into (key, executed action chunk, preceding actions, progress)
entries, one FAISS index per namespace (embodiment, task). A query retrieves neighbours, keeps the
trajectory-consistent ones (history, progress, one mode), and returns an elite prior chunk with a
confidence; ``guidance`` turns that into the sampler's start time tau0. No weights change.
``ScreenMemory`` (``embodia.memory.screen``) is the same mechanism for GUI screens: element references with
a precondition, a majority vote on the next action, the winner bound to the current UI tree.

Leaf package: numpy, faiss and the standard library only.
"""
if __name__ != "embodia.memory":     # the folder is the source of embodia.memory, never a package of its own
    raise ModuleNotFoundError(f"no module named {__name__!r}: import embodia.memory", name=__name__)
from embodia.memory.config import MemoryConfig
from embodia.memory.lock import MemoryBusy
from embodia.memory.screen import ScreenMemory
from embodia.memory.screen_query import ScreenRetrieval
from embodia.memory.screen_config import ScreenMemoryConfig
from embodia.memory.errors import MemoryFileError, MemoryMismatch, MemoryStoreError
from embodia.memory.persist import SCHEMA_VERSION
from embodia.memory.retrieval import Retrieval, tau0_from_confidence
from embodia.memory.store import SuccessMemory, make_namespace, stable_hash

__all__ = ["MemoryConfig", "SuccessMemory", "Retrieval", "MemoryStoreError", "MemoryFileError",
           "MemoryMismatch", "MemoryBusy", "make_namespace", "stable_hash", "tau0_from_confidence",
           "SCHEMA_VERSION", "ScreenMemory", "ScreenMemoryConfig", "ScreenRetrieval"]
