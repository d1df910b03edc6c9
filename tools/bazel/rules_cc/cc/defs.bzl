"""Bazel 4's built-in C++ rules, under the names `@bazel_tools` loads them by.

Debian's `bazel-rules-cc` is newer than its `bazel-bootstrap` (4.2.3) and does
not load there; `@bazel_tools` only needs these names to exist, and mplso
builds no C++.
"""

def cc_binary(**kwargs):
    native.cc_binary(**kwargs)

def cc_import(**kwargs):
    native.cc_import(**kwargs)

def cc_library(**kwargs):
    native.cc_library(**kwargs)

def cc_proto_library(**kwargs):
    native.cc_proto_library(**kwargs)

def cc_shared_library(**kwargs):
    native.cc_shared_library(**kwargs)

def cc_test(**kwargs):
    native.cc_test(**kwargs)

def cc_toolchain(**kwargs):
    native.cc_toolchain(**kwargs)

def cc_toolchain_suite(**kwargs):
    native.cc_toolchain_suite(**kwargs)

def objc_import(**kwargs):
    native.objc_import(**kwargs)

def objc_library(**kwargs):
    native.objc_library(**kwargs)
