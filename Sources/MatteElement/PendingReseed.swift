import Foundation
import MatteEngine

/// A reseed asked for and not yet applied to a frame. A value in the control box: the frame that
/// waits for a mask waits on the control lock's condition (`Locked.wait`), and the load's end
/// wakes it (`Locked.update`).
enum PendingReseed {
    /// From this source (nil: as configured).
    case ready(SeedSource?)
    /// A serialized event's mask, still decoding: the frame after the event waits for it. The load
    /// replaces this with `.ready` when it is done (unless a newer request replaced it first).
    case loading(MaskLoad)
}

/// The decoding of a serialized reseed's mask, which the frame after the event waits for.
struct MaskLoad {
    let path: String
    /// The request's number (`ReseedRequests.count`): a newer request replaces this one.
    let ticket: Int
    /// A frame has waited for it: the next frames do not (after a timeout the reseed comes when
    /// the load completes).
    var waited = false
}
