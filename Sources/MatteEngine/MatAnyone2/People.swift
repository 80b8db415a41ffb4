import Foundation

/// Telling people apart in a mask: connected regions of a person mask, or the grey levels of a
/// labelled seed mask. Pure functions on binary planes (row-major, `width` × `height`).
enum PersonMasks {
    /// The 8-connected regions of `mask` with at least `minimumArea` pixels, largest first.
    static func components(of mask: [Bool], width: Int, height: Int, minimumArea: Int) -> [[Bool]] {
        var label = [Int32](repeating: -1, count: mask.count)
        var regions: [(area: Int, pixels: [Int])] = []
        var stack: [Int] = []
        for start in mask.indices where mask[start] && label[start] < 0 {
            let id = Int32(regions.count)
            var pixels: [Int] = []
            label[start] = id
            stack.append(start)
            while let index = stack.popLast() {
                pixels.append(index)
                let x = index % width, y = index / width
                for dy in -1...1 {
                    let ny = y + dy
                    guard ny >= 0, ny < height else { continue }
                    for dx in -1...1 where dx != 0 || dy != 0 {
                        let nx = x + dx
                        guard nx >= 0, nx < width else { continue }
                        let neighbour = ny * width + nx
                        if mask[neighbour] && label[neighbour] < 0 {
                            label[neighbour] = id
                            stack.append(neighbour)
                        }
                    }
                }
            }
            regions.append((pixels.count, pixels))
        }
        return regions.filter { $0.area >= minimumArea }
            .sorted { $0.area > $1.area }
            .map { region in
                var plane = [Bool](repeating: false, count: mask.count)
                for index in region.pixels { plane[index] = true }
                return plane
            }
    }

    /// A labelled seed mask: each grey level above 0 covering at least `minimumArea` pixels is one
    /// person (a colour mask, converted to grey, keeps distinct colours apart). Anti-aliased edges
    /// (levels covering a few pixels) are ignored. Darkest label first, so the order is stable.
    static func labels(in pixels: [UInt8], minimumArea: Int) -> [UInt8] {
        var histogram = [Int](repeating: 0, count: 256)
        for value in pixels { histogram[Int(value)] += 1 }
        return (1...255).filter { histogram[$0] >= max(minimumArea, 1) }.map { UInt8($0) }
    }

    static func intersectionOverUnion(_ a: [Bool], _ b: [Bool]) -> Double {
        var both = 0, either = 0
        for index in a.indices {
            if a[index] && b[index] { both += 1 }
            if a[index] || b[index] { either += 1 }
        }
        return either == 0 ? 1 : Double(both) / Double(either)
    }
}

/// Why a track was (re)started or stopped, as the element reports it (`matanyone-reseeded`).
public enum TrackEventReason: String, Sendable {
    /// The tracker and the segmenter disagreed for `watchPatience` checks in a row.
    case drift
    /// The segmenter saw nobody for `watchPatience` checks: tracking stopped.
    case personLeft = "person-left"
    /// Someone was found again after everyone had left.
    case reentry = "re-entry"
    /// Someone new was found while fewer than max-people were tracked.
    case newPerson = "new-person"
}

/// One track event of a frame.
public struct TrackEvent: Equatable, Sendable {
    /// 1-based person number (the track's slot).
    public let person: Int
    public let reason: TrackEventReason
    /// The watch's IoU between the track and the segmenter when it decided (-1 when not measured).
    public let iou: Double
    /// MatAnyone2's mean uncertainty over the track when it decided (-1 when not measured).
    public let uncertainty: Double
}

/// The quality watch's settings (see `QualityWatch`).
public struct WatchSettings: Equatable, Sendable {
    /// Check every this many frames; 0 = no watch.
    public var interval = 0
    /// A track whose IoU with the segmenter's person falls below this disagrees.
    public var minimumIoU = 0.25
    /// A track whose mean uncertainty (MatAnyone2's uncert output over the person) passes this disagrees.
    public var maximumUncertainty = 0.8
    /// Consecutive disagreeing checks before acting (one bad check is noise).
    public var patience = 3
    public init() {}
}

/// Decides, check by check, what to do with each track: keep it, re-seed it (drift), stop it (its
/// person left). Pure logic; the engine measures and acts.
struct QualityWatch {
    enum Decision: Equatable {
        case keep
        case reseed
        case stop
    }

    let settings: WatchSettings
    private var strikes: [Int]
    private var absentStrikes: [Int]

    init(settings: WatchSettings, tracks: Int) {
        self.settings = settings
        strikes = [Int](repeating: 0, count: tracks)
        absentStrikes = [Int](repeating: 0, count: tracks)
    }

    /// `iou` nil: the segmenter has no person for this track (it left, or the frame is empty).
    mutating func judge(track: Int, iou: Double?, uncertainty: Double?) -> Decision {
        guard let iou else {
            strikes[track] = 0
            absentStrikes[track] += 1
            if absentStrikes[track] >= settings.patience {
                absentStrikes[track] = 0
                return .stop
            }
            return .keep
        }
        absentStrikes[track] = 0
        let disagrees = iou < settings.minimumIoU || (uncertainty ?? 0) > settings.maximumUncertainty
        strikes[track] = disagrees ? strikes[track] + 1 : 0
        if strikes[track] >= settings.patience {
            strikes[track] = 0
            return .reseed
        }
        return .keep
    }

    /// A track started or stopped: its history no longer applies.
    mutating func forget(track: Int) {
        strikes[track] = 0
        absentStrikes[track] = 0
    }
}
