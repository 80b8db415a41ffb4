/* Thin wrappers for what Swift cannot import from GStreamer/GLib headers: instance/class structs of
 * our own type, macro constants and variadic calls. No logic lives here. */
#ifndef GST_MATANYONE_SHIM_H
#define GST_MATANYONE_SHIM_H

#include <gst/gst.h>
#include <gst/base/gstbasetransform.h>
#include <gst/video/video.h>
#include <gst/video/gstvideofilter.h>
#include <gst/app/gstappsink.h>

/* Instance: the parent instance plus one slot holding a retained Swift object. */
typedef struct {
    GstVideoFilter parent;
    void *impl;
} GstMatAnyone;

typedef struct {
    GstVideoFilterClass parent_class;
} GstMatAnyoneClass;

static inline GType shim_type_video_filter(void) { return GST_TYPE_VIDEO_FILTER; }
static inline GType shim_type_none(void) { return G_TYPE_NONE; }

/* EXPLICIT_NOTIFY: the element emits notify itself, and not for a set it ignored. */
static inline GParamFlags shim_param_readwrite_ready(void) {
    return (GParamFlags)(G_PARAM_READWRITE | GST_PARAM_MUTABLE_READY | G_PARAM_EXPLICIT_NOTIFY);
}
static inline GParamFlags shim_param_readwrite_playing(void) {
    return (GParamFlags)(G_PARAM_READWRITE | GST_PARAM_MUTABLE_PLAYING | G_PARAM_EXPLICIT_NOTIFY);
}
static inline GSignalFlags shim_signal_action(void) {
    return (GSignalFlags)(G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION);
}
static inline GType G_TYPE_FROM_CLASS_shim(void *klass) { return G_TYPE_FROM_CLASS(klass); }
static inline GstClockTime shim_clock_time_none(void) { return GST_CLOCK_TIME_NONE; }
static inline GstFlowReturn shim_flow_dropped(void) { return GST_BASE_TRANSFORM_FLOW_DROPPED; }
static inline guint shim_gst_version_major(void) { return GST_VERSION_MAJOR; }
static inline guint shim_gst_version_minor(void) { return GST_VERSION_MINOR; }

static inline void shim_structure_set_uint64(GstStructure *s, const char *f, guint64 v) {
    gst_structure_set(s, f, G_TYPE_UINT64, v, NULL);
}
static inline void shim_structure_set_double(GstStructure *s, const char *f, double v) {
    gst_structure_set(s, f, G_TYPE_DOUBLE, v, NULL);
}
static inline void shim_structure_set_string(GstStructure *s, const char *f, const char *v) {
    gst_structure_set(s, f, G_TYPE_STRING, v, NULL);
}
static inline void shim_structure_set_boolean(GstStructure *s, const char *f, gboolean v) {
    gst_structure_set(s, f, G_TYPE_BOOLEAN, v, NULL);
}
static inline void shim_structure_set_uint(GstStructure *s, const char *f, guint v) {
    gst_structure_set(s, f, G_TYPE_UINT, v, NULL);
}


#endif
