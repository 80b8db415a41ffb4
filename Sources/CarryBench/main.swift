import Foundation
import MatteEngine
import MattePixels

// How well a stale alpha is carried to a later frame by the element's motion (MotionCarry), and
// what the motion costs. Driven by tools/carry.py, which decodes the clip, makes the alphas and the
// truth's edge bands; this reads them raw:
//
//   CarryBench --width W --height H --frames F.bgra --alphas A.gray --bands B.gray --ks 6,12
//   CarryBench --width W --height H --frames F.bgra --timing
//
// and prints one JSON object on stdout. Tuning options (--trust photometric|none,
// --luma-tolerance, --iterations, --finest-iterations, --radius, --smooth-once,
// --finest-level) try other motion settings; the defaults are the element's. --dump FRAME:PATH writes
// that frame's stale, carried and own alphas (k the largest) to PATH, one raw plane after another.

struct Options {
    var width = 0, height = 0
    var frames = "", alphas = "", bands = ""
    var ks: [Int] = [6, 12]
    var timing = false
    // Tuning (the defaults are the element's).
    var flow = OpticalFlow.Parameters()
    var lumaTolerance: Float?
    var rule: MotionCarry.TrustRule?
    /// Frame whose stale, carried and own alphas (k = the largest) are written raw to `dumpPath`.
    var dumpFrame: Int?
    var dumpPath = ""
}

func parse() -> Options {
    var options = Options()
    var arguments = CommandLine.arguments.dropFirst().makeIterator()
    func value(_ name: String) -> String {
        guard let next = arguments.next() else { fail("\(name) needs a value") }
        return next
    }
    while let argument = arguments.next() {
        switch argument {
        case "--width": options.width = Int(value(argument)) ?? 0
        case "--height": options.height = Int(value(argument)) ?? 0
        case "--frames": options.frames = value(argument)
        case "--alphas": options.alphas = value(argument)
        case "--bands": options.bands = value(argument)
        case "--ks": options.ks = value(argument).split(separator: ",").compactMap { Int($0) }
        case "--timing": options.timing = true
        case "--dump":
            let parts = value(argument).split(separator: ":", maxSplits: 1).map(String.init)
            guard parts.count == 2, let frame = Int(parts[0]) else { fail("--dump takes FRAME:PATH") }
            options.dumpFrame = frame
            options.dumpPath = parts[1]
        case "--luma-tolerance": options.lumaTolerance = Float(value(argument))
        case "--trust": options.rule = MotionCarry.TrustRule(rawValue: value(argument))
        case "--iterations": options.flow.iterations = Int(value(argument)) ?? options.flow.iterations
        case "--finest-iterations": options.flow.finestIterations = Int(value(argument)) ?? options.flow.finestIterations
        case "--radius": options.flow.radius = Int(value(argument)) ?? options.flow.radius
        case "--smooth-once": options.flow.smoothEveryIteration = false
        case "--finest-level": options.flow.finestLevel = Int(value(argument)) ?? 0
        default: fail("unknown option \(argument)")
        }
    }
    guard options.width > 0, options.height > 0, !options.frames.isEmpty else { fail("--width, --height and --frames are needed") }
    guard options.timing || (!options.alphas.isEmpty && !options.bands.isEmpty && !options.ks.isEmpty) else {
        fail("--alphas, --bands and --ks are needed (or --timing)")
    }
    return options
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("carry-bench: \(message)\n".utf8))
    exit(2)
}

func load(_ path: String, frameBytes: Int) -> [[UInt8]] {
    guard let data = FileManager.default.contents(atPath: path) else { fail("cannot read \(path)") }
    return stride(from: 0, to: data.count - frameBytes + 1, by: frameBytes).map { Array(data[$0..<$0 + frameBytes]) }
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    let sorted = values.sorted()
    return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * p + 0.5))]
}

func json(_ object: [String: Any]) -> String {
    let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    return String(decoding: data, as: UTF8.self)
}

let options = parse()

func configure(_ carry: MotionCarry) {
    if let tolerance = options.lumaTolerance { carry.lumaTolerance = tolerance }
    if let rule = options.rule { carry.rule = rule }
}
let w = options.width, h = options.height
let frames = load(options.frames, frameBytes: w * h * 4)
guard frames.count >= 2 else { fail("fewer than two frames in \(options.frames)") }

if options.timing {
    let carry = MotionCarry(frameWidth: w, frameHeight: h, flow: options.flow)
    configure(carry)
    var times: [Double] = []
    for round in 0..<3 {
        for (index, frame) in frames.enumerated() {
            frame.withUnsafeBufferPointer {
                carry.add(BGRAImage(base: $0.baseAddress!, width: w, height: h, stride: w * 4), pts: UInt64(round * frames.count + index))
            }
            if index > 0 { times.append(carry.lastMotionMs) }
        }
    }
    // A carry as the element makes one a frame: the composed motion already there (followed), the
    // warp at the carry size and the upsample to the frame.
    var plane = [UInt8](repeating: 128, count: w * h)
    let small = plane.withUnsafeMutableBufferPointer { carry.carrySized(GrayView(base: $0.baseAddress!, width: w, height: h, stride: w)) }
    let last = UInt64(2 * frames.count + frames.count - 1)
    var carryTimes: [Double] = []
    for _ in 0..<20 {
        let start = monotonicMs()
        _ = plane.withUnsafeMutableBufferPointer {
            carry.carry(small, from: last - 1, to: last, into: GrayImage(base: $0.baseAddress!, width: w, height: h, stride: w))
        }
        carryTimes.append(monotonicMs() - start)
    }
    print(json(["carry_ms_median": percentile(carryTimes, 0.5),
                "width": w, "height": h, "flow_width": carry.sizes.flowWidth, "flow_height": carry.sizes.flowHeight,
                "frames": times.count, "motion_ms_median": percentile(times, 0.5), "motion_ms_p95": percentile(times, 0.95),
                "cores": ProcessInfo.processInfo.activeProcessorCount]))
    exit(0)
}

let alphas = load(options.alphas, frameBytes: w * h)
let bands = load(options.bands, frameBytes: w * h)
let count = min(frames.count, alphas.count, bands.count)
let maxK = options.ks.max()!
guard count > maxK else { fail("\(count) frames: need more than \(maxK)") }
let carry = MotionCarry(frameWidth: w, frameHeight: h, capacity: maxK + 2, flow: options.flow)
configure(carry)
var small: [[Float]] = []
var sums: [Int: (staleFrame: Double, carriedFrame: Double, staleBand: Double, carriedBand: Double, pixels: Double, n: Int)] = [:]
var out = [UInt8](repeating: 0, count: w * h)
var times: [Double] = [], carryTimes: [Double] = []
for t in 0..<count {
    frames[t].withUnsafeBufferPointer { carry.add(BGRAImage(base: $0.baseAddress!, width: w, height: h, stride: w * 4), pts: UInt64(t)) }
    if t > 0 { times.append(carry.lastMotionMs) }
    var alpha = alphas[t]
    small.append(alpha.withUnsafeMutableBufferPointer { carry.carrySized(GrayView(base: $0.baseAddress!, width: w, height: h, stride: w)) })
    for k in options.ks where t >= k {
        let carryStart = monotonicMs()
        guard let carried = out.withUnsafeMutableBufferPointer({
            carry.carry(small[t - k], from: UInt64(t - k), to: UInt64(t), into: GrayImage(base: $0.baseAddress!, width: w, height: h, stride: w))
        }) else { fail("no motion from \(t - k) to \(t)") }
        carryTimes.append(monotonicMs() - carryStart)
        let truth = alphas[t], stale = alphas[t - k], band = bands[t]
        if t == options.dumpFrame, k == maxK {
            guard FileManager.default.createFile(atPath: options.dumpPath, contents: Data(stale + out + truth)) else {
                fail("cannot write \(options.dumpPath)")
            }
        }
        var staleFrame = 0, carriedFrame = 0, staleBand = 0, carriedBand = 0, bandPixels = 0
        for i in 0..<(w * h) {
            let s = abs(Int(stale[i]) - Int(truth[i])), c = abs(Int(out[i]) - Int(truth[i]))
            staleFrame += s
            carriedFrame += c
            if band[i] != 0 {
                staleBand += s
                carriedBand += c
                bandPixels += 1
            }
        }
        var entry = sums[k] ?? (0, 0, 0, 0, 0, 0)
        let pixels = Double(w * h) * 255
        entry.staleFrame += Double(staleFrame) / pixels
        entry.carriedFrame += Double(carriedFrame) / pixels
        if bandPixels > 0 {
            entry.staleBand += Double(staleBand) / (Double(bandPixels) * 255)
            entry.carriedBand += Double(carriedBand) / (Double(bandPixels) * 255)
        }
        entry.pixels += carried.meanPixels
        entry.n += 1
        sums[k] = entry
    }
    if t >= maxK { small[t - maxK] = [] }  // (no longer needed)
}
var results: [[String: Any]] = []
for k in options.ks.sorted() {
    guard let s = sums[k], s.n > 0 else { continue }
    let n = Double(s.n)
    results.append(["k": k, "frames": s.n,
                    "stale_frame": s.staleFrame / n, "carried_frame": s.carriedFrame / n,
                    "stale_band": s.staleBand / n, "carried_band": s.carriedBand / n,
                    "band_reduction": s.staleBand > 0 ? 1 - s.carriedBand / s.staleBand : 0,
                    "mean_carry_px": s.pixels / n])
}
print(json(["width": w, "height": h, "frames": count, "results": results,
            "motion_ms_median": percentile(times, 0.5), "motion_ms_p95": percentile(times, 0.95),
            // (Each carry here is rebuilt from the steps: the element extends the last one by a step.)
            "carry_ms_median": percentile(carryTimes, 0.5)]))
