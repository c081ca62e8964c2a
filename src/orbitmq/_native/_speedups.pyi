# The C extension (_speedups.c): one submodule per room, each typed by the room's native.pyi
# (orbitmq/protocol/native.pyi, store/native.pyi, broker/native.pyi).
from types import ModuleType

protocol: ModuleType
store: ModuleType
broker: ModuleType
