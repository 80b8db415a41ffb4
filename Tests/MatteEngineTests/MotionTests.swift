import Foundation
import Testing
@testable import MatteEngine
import TestPaths
import MattePixels

/// The motion estimate and the alpha carry, on a real frame moved by known amounts.
@Suite("Motion") struct MotionTests {
    static let width = 512, height = 288

    static func realFrame() throws -> [UInt8] {
        try #require(TestPaths.frames("test-sample2-512x288.bgra", width: width, height: height).first)
    }

    /// `frame` resampled so that output p shows the input at `map(p)` (bilinear, clamped).
    static func moved(_ frame: [UInt8], width: Int, height: Int, map: (Double, Double) -> (Double, Double)) -> [UInt8] {
        var out = [UInt8](repeating: 255, count: frame.count)
        for y in 0..<height {
            for x in 0..<width {
                let (sx, sy) = map(Double(x), Double(y))
                let cx = min(max(sx, 0), Double(width - 1)), cy = min(max(sy, 0), Double(height - 1))
                let x0 = Int(cx), y0 = Int(cy), x1 = min(x0 + 1, width - 1), y1 = min(y0 + 1, height - 1)
                let fx = cx - Double(x0), fy = cy - Double(y0)
                for c in 0..<3 {
                    func at(_ x: Int, _ y: Int) -> Double { Double(frame[(y * width + x) * 4 + c]) }
                    let value = (1 - fy) * ((1 - fx) * at(x0, y0) + fx * at(x1, y0)) + fy * ((1 - fx) * at(x0, y1) + fx * at(x1, y1))
                    out[(y * width + x) * 4 + c] = UInt8(min(255, max(0, value.rounded())))
                }
            }
        }
        return out
    }

    static func luma(_ frame: [UInt8], width: Int = width, height: Int = height, flowWidth: Int = 256, flowHeight: Int = 144) -> LumaPlane {
        frame.withUnsafeBufferPointer {
            LumaPlane(frame: BGRAImage(base: $0.baseAddress!, width: width, height: height, stride: width * 4),
                      width: flowWidth, height: flowHeight)
        }
    }

    /// Mean end-point error (px at the flow's size) of `field` against `truth` over the interior
    /// (a 12 % margin: the border has no motion to find).
    static func endPointError(_ field: FlowField, truth: (Double, Double) -> (Double, Double)) -> Double {
        let mx = field.width * 12 / 100, my = field.height * 12 / 100
        var total = 0.0, count = 0
        for y in my..<(field.height - my) {
            for x in mx..<(field.width - mx) {
                let (tx, ty) = truth(Double(x), Double(y))
                let i = y * field.width + x
                total += ((Double(field.dx[i]) - tx) * (Double(field.dx[i]) - tx) + (Double(field.dy[i]) - ty) * (Double(field.dy[i]) - ty)).squareRoot()
                count += 1
            }
        }
        return total / Double(count)
    }

    /// Moves a real frame by `transform` (in full-frame pixels, about the centre) and checks that the
    /// flow from the moved frame back to the original recovers it within 0.5 px at the flow's size.
    func recovers(_ name: String, _ transform: @escaping (Double, Double) -> (Double, Double)) throws {
        let original = try MotionTests.realFrame()
        let w = MotionTests.width, h = MotionTests.height
        // The moved frame at p shows the original at transform(p).
        let moved = MotionTests.moved(original, width: w, height: h, map: transform)
        let field = OpticalFlow().flow(from: MotionTests.luma(moved), to: MotionTests.luma(original))
        // Flow pixel q (centre (q + 0.5)·2 − 0.5 in the frame) → displacement at the flow's scale.
        let error = MotionTests.endPointError(field) { x, y in
            let fx = (x + 0.5) * 2 - 0.5, fy = (y + 0.5) * 2 - 0.5
            let (tx, ty) = transform(fx, fy)
            return ((tx - fx) / 2, (ty - fy) / 2)
        }
        #expect(error < 0.5, "\(name): mean end-point error \(error) px at 256×144")
        // And the estimate is not merely zero: the motion was at least a pixel somewhere.
        #expect(field.dx.contains { abs($0) > 1 } || field.dy.contains { abs($0) > 1 }, "\(name): no motion found")
    }

    @Test func recoversATranslation() throws {
        try recovers("shift (7.4, -3.2) px") { x, y in (x + 7.4, y - 3.2) }
    }

    @Test func recoversALargeTranslationCoarseToFine() throws {
        // 10 px at the flow's size: beyond one level's reach, within the pyramid's.
        try recovers("shift (20, 9) px") { x, y in (x + 20, y + 9) }
    }

    @Test func recoversAScale() throws {
        let cx = Double(MotionTests.width) / 2, cy = Double(MotionTests.height) / 2
        try recovers("scale 1.04") { x, y in (cx + (x - cx) * 1.04, cy + (y - cy) * 1.04) }
    }

    @Test func recoversARotation() throws {
        let cx = Double(MotionTests.width) / 2, cy = Double(MotionTests.height) / 2
        let angle = 2.0 * Double.pi / 180
        try recovers("rotation 2°") { x, y in
            (cx + (x - cx) * cos(angle) - (y - cy) * sin(angle), cy + (x - cx) * sin(angle) + (y - cy) * cos(angle))
        }
    }

    @Test func sizesFollowTheFrame() {
        let hd = MotionCarry.Sizes(frameWidth: 1920, frameHeight: 1080)
        #expect(hd.carryWidth == 512 && hd.carryHeight == 288 && hd.flowWidth == 256 && hd.flowHeight == 144)
        let small = MotionCarry.Sizes(frameWidth: 320, frameHeight: 240)
        #expect(small.carryWidth == 320 && small.carryHeight == 240 && small.flowWidth == 160)
        let odd = MotionCarry.Sizes(frameWidth: 3, frameHeight: 1)
        #expect(odd.carryWidth == 3 && odd.carryHeight == 1 && odd.flowWidth == 1 && odd.flowHeight == 1)
    }

    /// Frames as small as a pixel, or a flat picture, still carry (no trap, no NaN).
    @Test func tinyAndFlatFramesCarry() throws {
        for (w, h) in [(1, 1), (3, 1), (2, 5), (17, 9)] {
            let carry = MotionCarry(frameWidth: w, frameHeight: h)
            let frame = [UInt8](repeating: 128, count: w * h * 4)
            for k in 0..<3 {
                frame.withUnsafeBufferPointer { carry.add(BGRAImage(base: $0.baseAddress!, width: w, height: h, stride: w * 4), pts: UInt64(k)) }
            }
            var alpha = [UInt8](repeating: 200, count: w * h)
            let small = alpha.withUnsafeMutableBufferPointer { carry.carrySized(GrayView(base: $0.baseAddress!, width: w, height: h, stride: w)) }
            var out = [UInt8](repeating: 0, count: w * h)
            let carried = try #require(out.withUnsafeMutableBufferPointer {
                carry.carry(small, from: 0, to: 2, into: GrayImage(base: $0.baseAddress!, width: w, height: h, stride: w))
            })
            #expect(carried.frames == 2 && carried.meanPixels.isFinite, "\(w)×\(h)")
            #expect(out.allSatisfy { abs(Int($0) - 200) <= 1 }, "\(w)×\(h): \(out)")
        }
    }

    /// A soft disc alpha at `centre` (full-frame pixels).
    static func disc(width: Int, height: Int, centre: (Double, Double), radius: Double) -> [UInt8] {
        var plane = [UInt8](repeating: 0, count: width * height)
        for y in 0..<height {
            for x in 0..<width {
                let d = ((Double(x) - centre.0) * (Double(x) - centre.0) + (Double(y) - centre.1) * (Double(y) - centre.1)).squareRoot()
                plane[y * width + x] = UInt8(255 * min(1, max(0, radius - d + 0.5)))
            }
        }
        return plane
    }

    static func meanAbs(_ a: [UInt8], _ b: [UInt8]) -> Double {
        zip(a, b).reduce(0.0) { $0 + abs(Double($1.0) - Double($1.1)) } / Double(a.count) / 255
    }

    /// Frames of the real picture moving 6 px a frame to the right; the alpha of frame 0 (a disc)
    /// carried to frame 4 lands on the disc moved 24 px, far nearer than the stale one.
    @Test func carriesAnAlphaAlongAKnownTranslation() throws {
        let original = try MotionTests.realFrame()
        let w = MotionTests.width, h = MotionTests.height
        let carry = MotionCarry(frameWidth: w, frameHeight: h)
        let step = 6.0
        for k in 0...4 {
            let frame = MotionTests.moved(original, width: w, height: h) { x, y in (x - step * Double(k), y) }
            frame.withUnsafeBufferPointer {
                carry.add(BGRAImage(base: $0.baseAddress!, width: w, height: h, stride: w * 4), pts: UInt64(k) * 40_000_000)
            }
        }
        var alpha = MotionTests.disc(width: w, height: h, centre: (220, 150), radius: 50)
        let truth = MotionTests.disc(width: w, height: h, centre: (220 + 4 * step, 150), radius: 50)
        let small = alpha.withUnsafeMutableBufferPointer { carry.carrySized(GrayView(base: $0.baseAddress!, width: w, height: h, stride: w)) }
        var out = [UInt8](repeating: 0, count: w * h)
        let carried = try #require(out.withUnsafeMutableBufferPointer {
            carry.carry(small, from: 0, to: 160_000_000, into: GrayImage(base: $0.baseAddress!, width: w, height: h, stride: w))
        })
        #expect(carried.frames == 4)
        #expect(abs(carried.meanPixels - 4 * step) < 1.5, "carried \(carried.meanPixels) px, moved \(4 * step)")
        let stale = MotionTests.meanAbs(alpha, truth), moved = MotionTests.meanAbs(out, truth)
        #expect(moved < stale * 0.25, "carried error \(moved) vs stale \(stale)")
        // Unknown motion (a frame never added, or time backwards) carries nothing.
        #expect(carry.carry(small, from: 1, to: 160_000_000, into: GrayImage(base: &alpha, width: w, height: h, stride: w)) == nil)
        #expect(carry.carry(small, from: 160_000_000, to: 0, into: GrayImage(base: &alpha, width: w, height: h, stride: w)) == nil)
    }

    /// Where the picture changes without a motion to explain it (an occluder appears), the warped
    /// previous frame does not match and the carried alpha there is the stale alpha, not the warped one.
    @Test func untrustedMotionFallsBackToTheStaleAlpha() throws {
        let original = try MotionTests.realFrame()
        let w = MotionTests.width, h = MotionTests.height
        let carry = MotionCarry(frameWidth: w, frameHeight: h)
        // Frame 1: the whole picture shifted 8 px, and an occluder over part of it that frame 0 does
        // not show anywhere (a high-contrast checkerboard, as a hand or a prop in front).
        var next = MotionTests.moved(original, width: w, height: h) { x, y in (x - 8, y) }
        let block = (x: 200..<300, y: 100..<200)
        for y in block.y {
            for x in block.x {
                let value: UInt8 = ((x / 6) + (y / 6)) % 2 == 0 ? 250 : 10
                for c in 0..<3 { next[(y * w + x) * 4 + c] = value }
            }
        }
        for (k, frame) in [original, next].enumerated() {
            frame.withUnsafeBufferPointer {
                carry.add(BGRAImage(base: $0.baseAddress!, width: w, height: h, stride: w * 4), pts: UInt64(k))
            }
        }
        // Alpha of frame 0: a vertical edge crossing the block (left half foreground).
        var alpha = [UInt8](repeating: 0, count: w * h)
        for y in 0..<h { for x in 0..<250 { alpha[y * w + x] = 255 } }
        let small = alpha.withUnsafeMutableBufferPointer { carry.carrySized(GrayView(base: $0.baseAddress!, width: w, height: h, stride: w)) }
        var out = [UInt8](repeating: 0, count: w * h)
        _ = try #require(out.withUnsafeMutableBufferPointer {
            carry.carry(small, from: 0, to: 1, into: GrayImage(base: $0.baseAddress!, width: w, height: h, stride: w))
        })
        // Inside the block (away from its rim) the edge stays where the stale alpha has it…
        var staleLike = 0, total = 0
        for y in 120..<180 {
            for x in 220..<280 {
                total += 1
                if abs(Int(out[y * w + x]) - Int(alpha[y * w + x])) < 64 { staleLike += 1 }
            }
        }
        #expect(Double(staleLike) / Double(total) > 0.8, "\(staleLike) of \(total) block pixels kept the stale alpha")
        // …while outside it, where the shift is clean, the edge moved 8 px right.
        // (Rows well away from it: next to it, the occluder's strong texture pulls the motion of the
        // flat wall around it at the coarse levels.)
        let rows = Array(stride(from: 4, to: 60, by: 4)) + Array(stride(from: 240, to: 284, by: 4))
        let carried = rows.filter { out[$0 * w + 254] > 200 && out[$0 * w + 250 + 13] < 55 }
        #expect(Double(carried.count) >= 0.8 * Double(rows.count), "edge carried on rows \(carried) only")
    }
}
