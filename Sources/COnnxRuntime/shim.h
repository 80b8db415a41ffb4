/* The ONNX Runtime C API header, from Debian's libonnxruntime-dev (unpacked by scripts/setup.sh into
 * .deps/). Only types are used at build time: the library itself is dlopen'ed at run time. */
#ifndef GST_MATANYONE_ORT_SHIM_H
#define GST_MATANYONE_ORT_SHIM_H
#include "../../.deps/ort-dev/usr/include/onnxruntime/onnxruntime_c_api.h"
#endif
