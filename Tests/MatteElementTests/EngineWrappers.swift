import CGStreamer
import Foundation
@testable import MatteElement
import MatteEngine

/// The tests' engine seam: wraps the engine that the `matanyone` element of a given name starts (an
/// engine made slow on purpose, say) in the pipelines the helpers parse, which hand each element its
/// wrap (`MatteFilter.injectEngineMaker`) before it starts. Keyed by element name, so that tests running
/// side by side do not meet.
enum EngineWrappers {
    typealias Wrap = (MattingEngine) -> MattingEngine
    private static let table = Locked<[String: Wrap]>([:])

    /// Wraps the engine of every element named `name` in pipelines parsed from now on (nil: no longer).
    static func set(_ wrap: Wrap?, forElementNamed name: String) {
        table.withLock { $0[name] = wrap }
    }

    /// Hands the wraps set to the elements of those names in `pipeline` (a bin), before it plays.
    static func inject(into pipeline: UnsafeMutablePointer<GstElement>) {
        let bin = UnsafeMutableRawPointer(pipeline).assumingMemoryBound(to: GstBin.self)
        for (name, wrap) in table.withLock({ $0 }) {
            guard let element = gst_bin_get_by_name(bin, name) else { continue }
            defer { gst_object_unref(element) }
            MatteFilter.of(element)?.injectEngineMaker(wrapping: wrap)
        }
    }
}
