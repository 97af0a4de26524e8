// rxe_probe: the facts of one kernel's Soft-RoCE that the transport works
// around, measured with plain libibverbs (no project code), one line each,
// for the per-kernel table of docs/soft-roce.md. guest_ci.sh runs it in every
// VM of the CI stage:
//
//   rxe_probe DEV_A GID_INDEX_A DEV_B GID_INDEX_B
//
// Lines (all start with "PROBE "):
//   max_msg_sz, gid_tbl_len, vendor   port and device attributes of DEV_A
//   gid_table <n>: ...                ibv_query_gid_table with room for n
//                                     entries: the count or the errno
//   inline <asked>: ...               ibv_create_qp with that max_inline_data:
//                                     what was granted, or the errno
//   query_qp sl/tclass                an RC QP moved to RTR with SL 3 and
//                                     traffic class 0x88, read back
//   dead_peer <how>: ...              A's QP connected to B's, B's QP moved to
//                                     ERR (or destroyed); a 64-byte SEND from
//                                     A with retry_cnt 7 and timeout 14
//                                     (67 ms): the completion status and when,
//                                     or "no completion in N ms"
// Exit status 0 unless the probe itself could not run (no device, ...).
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kMsg = 64, kDeadPeerWaitMs = 15000 };

static void die(const char *what) {
  fprintf(stderr, "rxe_probe: %s: %s\n", what, strerror(errno));
  exit(2);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

struct side {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_mr *mr;
  struct ibv_qp *qp;
  int gid_index;
  union ibv_gid gid;
  char buf[kMsg * 4];
};

static struct ibv_context *open_device(const char *name) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (list == NULL) die("ibv_get_device_list");
  struct ibv_context *ctx = NULL;
  for (int i = 0; i < n; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), name) == 0)
      ctx = ibv_open_device(list[i]);
  }
  ibv_free_device_list(list);
  if (ctx == NULL) {
    fprintf(stderr, "rxe_probe: no device %s\n", name);
    exit(2);
  }
  return ctx;
}

static struct ibv_qp *create_qp(struct side *s, uint32_t max_inline, int *err) {
  struct ibv_qp_init_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.send_cq = s->cq;
  attr.recv_cq = s->cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = 16;
  attr.cap.max_recv_wr = 16;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = max_inline;
  attr.sq_sig_all = 1;
  struct ibv_qp *qp = ibv_create_qp(s->pd, &attr);
  if (qp == NULL) {
    *err = errno;
    return NULL;
  }
  // What create_qp wrote back is what the provider granted.
  struct ibv_qp_attr got;
  struct ibv_qp_init_attr got_init;
  if (ibv_query_qp(qp, &got, IBV_QP_CAP, &got_init) == 0)
    *err = -(int)got.cap.max_inline_data - 1;
  else
    *err = -(int)attr.cap.max_inline_data - 1;
  return qp;
}

static void setup(struct side *s, const char *dev, int gid_index) {
  s->ctx = open_device(dev);
  s->gid_index = gid_index;
  if (ibv_query_gid(s->ctx, 1, gid_index, &s->gid)) die("ibv_query_gid");
  s->pd = ibv_alloc_pd(s->ctx);
  if (s->pd == NULL) die("ibv_alloc_pd");
  s->cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
  if (s->cq == NULL) die("ibv_create_cq");
  s->mr = ibv_reg_mr(s->pd, s->buf, sizeof s->buf, IBV_ACCESS_LOCAL_WRITE);
  if (s->mr == NULL) die("ibv_reg_mr");
}

static int to_init(struct ibv_qp *qp) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  return ibv_modify_qp(
      qp, &a,
      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct side *s, const struct side *peer, uint8_t sl,
                  uint8_t tclass) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer->qp->qp_num;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = peer->gid;
  a.ah_attr.grh.sgid_index = (uint8_t)s->gid_index;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.grh.traffic_class = tclass;
  a.ah_attr.sl = sl;
  a.ah_attr.port_num = 1;
  return ibv_modify_qp(s->qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                           IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ibv_qp *qp) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
}

static void new_pair(struct side *a, struct side *b, uint8_t sl,
                     uint8_t tclass) {
  int err = 0;
  a->qp = create_qp(a, 0, &err);
  b->qp = create_qp(b, 0, &err);
  if (a->qp == NULL || b->qp == NULL) die("ibv_create_qp");
  if (to_init(a->qp) || to_init(b->qp)) die("modify_qp INIT");
  if (to_rtr(a, b, sl, tclass) || to_rtr(b, a, sl, tclass))
    die("modify_qp RTR");
  if (to_rts(a->qp) || to_rts(b->qp)) die("modify_qp RTS");
}

static void drain(struct ibv_cq *cq) {
  struct ibv_wc wc;
  while (ibv_poll_cq(cq, 1, &wc) > 0) {
  }
}

// A connected pair, B's end made dead by `how`; one SEND from A, timed.
static void dead_peer(struct side *a, struct side *b, const char *how) {
  new_pair(a, b, 0, 0);
  if (strcmp(how, "err") == 0) {
    struct ibv_qp_attr at;
    memset(&at, 0, sizeof at);
    at.qp_state = IBV_QPS_ERR;
    if (ibv_modify_qp(b->qp, &at, IBV_QP_STATE)) die("modify_qp ERR");
  } else {
    if (ibv_destroy_qp(b->qp)) die("ibv_destroy_qp");
    b->qp = NULL;
  }
  struct ibv_sge sge = {(uintptr_t)a->buf, kMsg, a->mr->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  double start = now_ms();
  if (ibv_post_send(a->qp, &wr, &bad)) die("ibv_post_send");
  struct ibv_wc wc;
  int n = 0;
  while ((n = ibv_poll_cq(a->cq, 1, &wc)) == 0 &&
         now_ms() - start < kDeadPeerWaitMs) {
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
  }
  const char *desc = how[0] == 'e' ? "peer QP in ERR" : "peer QP destroyed";
  if (n > 0) {
    printf("PROBE dead_peer %s: %s after %.0f ms (retry_cnt 7, timeout 14)\n",
           desc, ibv_wc_status_str(wc.status), now_ms() - start);
  } else {
    printf(
        "PROBE dead_peer %s: no completion in %d ms (retry_cnt 7, timeout "
        "14)\n",
        desc, kDeadPeerWaitMs);
  }
  fflush(stdout);
  ibv_destroy_qp(a->qp);
  if (b->qp != NULL) ibv_destroy_qp(b->qp);
  a->qp = b->qp = NULL;
  drain(a->cq);
  drain(b->cq);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: rxe_probe DEV_A GID_INDEX_A DEV_B GID_INDEX_B\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  static struct side a, b;
  setup(&a, argv[1], atoi(argv[2]));
  setup(&b, argv[3], atoi(argv[4]));

  struct ibv_device_attr dev;
  struct ibv_port_attr port;
  if (ibv_query_device(a.ctx, &dev)) die("ibv_query_device");
  if (ibv_query_port(a.ctx, 1, &port)) die("ibv_query_port");
  printf("PROBE max_msg_sz: %u (0x%x)\n", port.max_msg_sz, port.max_msg_sz);
  printf("PROBE gid_tbl_len: %d\n", port.gid_tbl_len);
  printf("PROBE vendor: 0x%x, max_qp_wr %d, max_sge %d, active_mtu %d\n",
         dev.vendor_id, dev.max_qp_wr, dev.max_sge, 128 << port.active_mtu);

  // The table query's buffer is one ioctl attribute (16-bit length).
  size_t sizes[] = {(size_t)port.gid_tbl_len, 4 * (size_t)port.gid_tbl_len};
  for (int i = 0; i < 2; ++i) {
    struct ibv_gid_entry *entries = calloc(sizes[i], sizeof *entries);
    ssize_t got = ibv_query_gid_table(a.ctx, entries, sizes[i], 0);
    if (got < 0) {
      printf("PROBE gid_table %zu entries (%zu bytes): %s\n", sizes[i],
             sizes[i] * sizeof *entries, strerror((int)-got));
    } else {
      printf("PROBE gid_table %zu entries (%zu bytes): %zd valid\n", sizes[i],
             sizes[i] * sizeof *entries, got);
    }
    free(entries);
  }

  uint32_t asks[] = {0, 64, 236, 256, 512, 1024, 2048};
  for (size_t i = 0; i < sizeof asks / sizeof asks[0]; ++i) {
    int err = 0;
    struct ibv_qp *qp = create_qp(&a, asks[i], &err);
    if (qp == NULL) {
      printf("PROBE inline %u: %s\n", asks[i], strerror(err));
    } else {
      printf("PROBE inline %u: granted %d\n", asks[i], -err - 1);
      ibv_destroy_qp(qp);
    }
  }

  new_pair(&a, &b, 3, 0x88);
  struct ibv_qp_attr got;
  struct ibv_qp_init_attr got_init;
  if (ibv_query_qp(a.qp, &got, IBV_QP_AV, &got_init)) die("ibv_query_qp");
  printf(
      "PROBE query_qp: set sl 3, traffic_class 0x88; read back sl %u, "
      "traffic_class 0x%x\n",
      got.ah_attr.sl, got.ah_attr.grh.traffic_class);
  ibv_destroy_qp(a.qp);
  ibv_destroy_qp(b.qp);

  dead_peer(&a, &b, "err");
  dead_peer(&a, &b, "destroyed");
  return 0;
}
