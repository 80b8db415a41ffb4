/* Test-only: GstHarness and appsink for driving the element in-process. */
#include <gst/check/gstharness.h>
#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
