import Foundation
import Testing
@testable import MatteEngine
import TestPaths
import MattePixels

/// Several people (one memory bank each, one encoding per frame) and the quality watch (re-seed on
/// drift, stop when the person leaves, pick them up again), on the test clip's real frames.
@Suite(.serialized) struct PeopleTests {
    static let width = 512, height = 288

    // MARK: Pure logic

    @Test func componentsAreSeparateRegionsLargestFirstNoiseDropped() {
        let width = 10, height = 4
        var mask = [Bool](repeating: false, count: width * height)
        for y in 0..<4 { for x in 0..<2 { mask[y * width + x] = true } }      // 8 pixels
        for y in 1..<3 { for x in 5..<9 { mask[y * width + x] = true } }      // 8 + …
        mask[3 * width + 9] = true                                              // diagonal neighbour of (8,2)
        mask[3 * width + 3] = true                                              // a lone pixel
        let regions = PersonMasks.components(of: mask, width: width, height: height, minimumArea: 2)
        #expect(regions.count == 2)
        #expect(regions[0].filter { $0 }.count == 9 && regions[0][3 * width + 9])
        #expect(regions[1].filter { $0 }.count == 8 && regions[1][0])
    }

    @Test func labelsAreGreyLevelsThatCoverEnough() {
        let pixels: [UInt8] = [0, 0, 80, 80, 80, 200, 200, 200, 200, 128]
        #expect(PersonMasks.labels(in: pixels, minimumArea: 2) == [80, 200])
    }

    @Test func theWatchActsOnlyAfterPatienceAndForgetsOnChange() {
        var settings = WatchSettings()
        settings.patience = 2
        settings.minimumIoU = 0.5
        settings.maximumUncertainty = 0.9
        var watch = QualityWatch(settings: settings, tracks: 2)
        #expect(watch.judge(track: 0, iou: 0.2, uncertainty: 0.1) == .keep)
        #expect(watch.judge(track: 0, iou: 0.8, uncertainty: 0.1) == .keep)      // agreement resets the count
        #expect(watch.judge(track: 0, iou: 0.2, uncertainty: 0.1) == .keep)
        #expect(watch.judge(track: 0, iou: 0.9, uncertainty: 0.95) == .reseed)   // uncertainty disagrees too
        #expect(watch.judge(track: 1, iou: nil, uncertainty: nil) == .keep)
        #expect(watch.judge(track: 1, iou: nil, uncertainty: nil) == .stop)
        #expect(watch.judge(track: 1, iou: nil, uncertainty: nil) == .keep)
        watch.forget(track: 1)
        #expect(watch.judge(track: 1, iou: nil, uncertainty: nil) == .keep)
    }

    // MARK: Real frames

    private func frames() throws -> [[UInt8]] {
        try TestPaths.frames("test-sample2-512x288.bgra", width: Self.width, height: Self.height)
    }

    private func dancerMask() throws -> [UInt8] {
        try [UInt8](Data(contentsOf: URL(fileURLWithPath: TestPaths.dataDir + "/test-sample2-mask-512x288.gray")))
    }

    /// A second "person": a box where the dancer's mask has nothing, at least 8 px away from it.
    private func boxAwayFrom(_ dancer: [UInt8]) throws -> [UInt8] {
        var box = [UInt8](repeating: 0, count: dancer.count)
        let side = 72
        for left in stride(from: 8, to: Self.width - side - 8, by: 8) {
            let clear = (0..<side + 16).allSatisfy { dy in
                (0..<side + 16).allSatisfy { dx in dancer[(100 - 8 + dy) * Self.width + left - 8 + dx] == 0 }
            }
            if clear {
                for dy in 0..<side { for dx in 0..<side { box[(100 + dy) * Self.width + left + dx] = 255 } }
                return box
            }
        }
        Issue.record("no room for a second person beside the dancer")
        throw EngineError.badSettings(detail: "no room")
    }

    private func run(_ engine: MatAnyone2Engine, _ frames: [[UInt8]], persons: [Int?]) throws -> [[[Float]]] {
        try workingAlphas(engine, frames, width: Self.width, height: Self.height, persons: persons)
    }

    /// Each person's track with two people equals the track of that person alone (one engine per
    /// person, which the parity test holds to upstream), and the output is their union; also with the
    /// two people's state on the device path (built-in graphs, shared encoder tensors there).
    @Test(arguments: [DataPlacement.host, .device])
    func twoPeopleEachTrackAsIfAlone(placement: DataPlacement) throws {
        let clip = Array(try frames().prefix(6))
        // (The clip's mask has soft edges; a label is one grey level, so the dancer alone is its binary form.)
        let dancer = try dancerMask().map { $0 >= 128 ? UInt8(255) : 0 }
        let box = try boxAwayFrom(dancer)
        // Labels by grey level: the dancer 100, the box 200.
        let labelled = zip(dancer, box).map { $0 >= 128 ? UInt8(100) : ($1 > 0 ? 200 : 0) }
        var parameters = MatAnyone2Parameters()
        parameters.warmup = 2
        parameters.maxPeople = 2
        var alone = parameters
        alone.maxPeople = 1
        let options = EngineOptions(modelDir: TestPaths.modelDir)
        var placed = options
        placed.dataPlacement = placement
        let together = try MatAnyone2Engine(options: placed, parameters: parameters,
                                            seed: .mask(pixels: labelled, width: Self.width, height: Self.height))
        // The latency warm-up runs every person slot once and forgets it: the tracks below are unaffected.
        #expect(try together.warmUp(width: Self.width, height: Self.height) > 0)
        #expect(!together.isSeeded)
        let both = try run(together, clip, persons: [1, 2, nil])
        for (person, mask) in [(0, dancer), (1, box)] {
            let single = try MatAnyone2Engine(options: options, parameters: alone,
                                              seed: .mask(pixels: mask, width: Self.width, height: Self.height))
            let solo = try run(single, clip, persons: [nil])
            var worst: Float = 0
            for (frame, outputs) in both.enumerated() {
                worst = max(worst, zip(outputs[person], solo[frame][0]).map { abs($0 - $1) }.max()!)
            }
            print("person \(person + 1) of 2 (\(placement)) vs alone over \(clip.count) frames: max |Δα| \(worst)")
            // The device path's graphs round a little differently (1.4e-6 measured against the host path).
            #expect(worst <= (placement == .host ? 1e-6 : 1e-5))
        }
        for outputs in both {
            let union = zip(outputs[0], outputs[1]).map { max($0, $1) }
            #expect(union == outputs[2])
        }
        #expect(both.last![0] != both.last![1], "the two tracks must be different people")
    }

    /// The watch re-seeds a track that disagrees with the segmenter (drift; thresholds forced so that
    /// it must, and, as a control, so that it must not).
    @Test func driftIsReseededOnlyWhenTheTrackDisagrees() throws {
        let clip = Array(try frames().prefix(6))
        let box = try boxAwayFrom(try dancerMask())   // seeded on a box, not on the dancer: a wrong track
        func events(minimumIoU: Double, placement: DataPlacement = .host) throws -> (events: [TrackEvent], uncertainty: [Double]) {
            var parameters = MatAnyone2Parameters()
            parameters.warmup = 1
            parameters.watch.interval = 2
            parameters.watch.patience = 1
            parameters.watch.minimumIoU = minimumIoU
            parameters.watch.maximumUncertainty = 1
            var options = EngineOptions(modelDir: TestPaths.modelDir)
            options.dataPlacement = placement
            let engine = try MatAnyone2Engine(options: options, parameters: parameters,
                                              seed: .mask(pixels: box, width: Self.width, height: Self.height))
            var plane = [UInt8](repeating: 0, count: Self.width * Self.height)
            var report = FrameReport(modelCount: engine.modelNames.count)
            var seen: [TrackEvent] = []
            var uncertainty: [Double] = []
            for frame in clip {
                report.clear()
                try frame.withUnsafeBufferPointer { pixels in
                    try plane.withUnsafeMutableBufferPointer { alpha in
                        try engine.matte(BGRAImage(base: pixels.baseAddress!, width: Self.width, height: Self.height, stride: Self.width * 4),
                                         into: GrayImage(base: alpha.baseAddress!, width: Self.width, height: Self.height, stride: Self.width),
                                         report: &report)
                    }
                }
                seen += report.events
                uncertainty.append(report.watchUncertainty)
                #expect(report.watchIoU <= 1)
            }
            return (seen, uncertainty)
        }
        let drifted = try events(minimumIoU: 1).events
        #expect(!drifted.isEmpty && drifted.allSatisfy { $0.reason == .drift && $0.person == 1 && $0.iou < 1 })
        let kept = try events(minimumIoU: 0)
        #expect(kept.events.isEmpty)
        // The device path brings the uncertainty down for the watch: the same judgement, the same figures.
        let onDevice = try events(minimumIoU: 0, placement: .device)
        #expect(onDevice.events.isEmpty && kept.uncertainty.contains { $0 > 0 })
        #expect(zip(kept.uncertainty, onDevice.uncertainty).allSatisfy { abs($0 - $1) <= 1e-5 }, "\(kept.uncertainty) vs \(onDevice.uncertainty)")
    }

    /// The person leaves (black frames): tracking stops, the alpha is the no-person alpha; they come
    /// back: the track starts again (re-entry).
    @Test func exitStopsTheTrackAndReturnPicksItUp() throws {
        let clip = try frames()
        let black = [UInt8](repeating: 0, count: Self.width * Self.height * 4)
        let sequence = Array(clip.prefix(3)) + [[UInt8]](repeating: black, count: 5) + Array(clip[3..<6])
        var parameters = MatAnyone2Parameters()
        parameters.warmup = 1
        parameters.watch.interval = 1
        parameters.watch.patience = 2
        parameters.watch.minimumIoU = 0
        parameters.watch.maximumUncertainty = 1
        parameters.noPersonAlpha = 0
        let engine = try MatAnyone2Engine(options: EngineOptions(modelDir: TestPaths.modelDir), parameters: parameters)
        var plane = [UInt8](repeating: 7, count: Self.width * Self.height)
        var report = FrameReport(modelCount: engine.modelNames.count)
        var timeline: [(seeded: Bool, events: [TrackEventReason], blank: Bool)] = []
        for frame in sequence {
            report.clear()
            try frame.withUnsafeBufferPointer { pixels in
                try plane.withUnsafeMutableBufferPointer { alpha in
                    try engine.matte(BGRAImage(base: pixels.baseAddress!, width: Self.width, height: Self.height, stride: Self.width * 4),
                                     into: GrayImage(base: alpha.baseAddress!, width: Self.width, height: Self.height, stride: Self.width),
                                     report: &report)
                }
            }
            timeline.append((report.seeded, report.events.map(\.reason), plane.allSatisfy { $0 == 0 }))
        }
        print("exit/re-entry timeline: \(timeline.map { "\($0.seeded ? "T" : "-")\($0.events.map(\.rawValue))" })")
        #expect(timeline[0].seeded && timeline[2].seeded)
        // Black frames 3 and 4 are the two checks without a person: the track stops on frame 4.
        #expect(timeline[4].events == [.personLeft] && !timeline[4].seeded && timeline[4].blank)
        #expect(timeline[5..<8].allSatisfy { !$0.seeded && $0.blank && $0.events.isEmpty })
        #expect(timeline[8].events == [.reentry] && timeline[8].seeded)
        #expect(timeline.flatMap(\.events).count == 2)
    }
}
