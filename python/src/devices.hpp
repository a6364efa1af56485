// The OpenCL devices FlashCL can use, as `flashcl info` numbers them ("P:D").
#pragma once

#include <nanobind/nanobind.h>

namespace flashcl_py {

nanobind::list list_devices();

} // namespace flashcl_py
