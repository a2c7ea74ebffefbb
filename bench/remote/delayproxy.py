#!/usr/bin/env python3
"""A TCP proxy that delays every byte by a fixed one-way latency (this
kernel has no netem). Order is kept; bandwidth is not limited.

    delayproxy.py LISTEN_PORT TARGET_PORT ONE_WAY_MS
"""
import asyncio
import sys
import time


async def pump(reader, writer, delay):
    queue = asyncio.Queue()

    async def deliver():
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                writer.write_eof() if writer.can_write_eof() else writer.close()
                return
            writer.write(data)
            await writer.drain()

    task = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(1 << 16)
            queue.put_nowait((time.monotonic() + delay, data or None))
            if not data:
                break
        await task
    except (ConnectionError, asyncio.CancelledError):
        task.cancel()
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def main():
    listen, target, ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    delay = ms / 1000.0

    async def handle(cr, cw):
        try:
            sr, sw = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pump(cr, sw, delay), pump(sr, cw, delay))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


asyncio.run(main())
