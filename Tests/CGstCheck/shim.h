/* Test-only: GstHarness and appsink for driving the element in-process. */
#include <gst/check/gstharness.h>
#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>

/* g_signal_emit_by_name is variadic. */
static inline void shim_emit_reseed(GstElement *element) { g_signal_emit_by_name(element, "reseed"); }
