import CGStreamer
import MatteElement

/// The loader strips `libgst` from `libgstmatanyone.so` and looks up this symbol.
@_cdecl("gst_plugin_matanyone_get_desc")
public func gstPluginMatAnyoneGetDesc() -> UnsafePointer<GstPluginDesc> {
    UnsafePointer(MatAnyonePlugin.descriptor)
}
