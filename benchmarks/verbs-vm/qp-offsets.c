// SPDX-License-Identifier: Apache-2.0
/*
 * Never run: run.sh compiles it to assembly against the guest kernel's own headers (and siw's), and
 * reads the "->NAME VALUE" strings out of the .s file (kbuild's asm-offsets technique, with the kernel's
 * DEFINE/OFFSET macros). guest.sh uses the values to place kprobes that show the connection parameters
 * and queue pair attributes the kernel applied to the verbs provider's queue pairs.
 */
#include <linux/kbuild.h>
#include <linux/stddef.h>
#include <rdma/ib_cm.h>
#include <rdma/ib_verbs.h>
#include <rdma/iw_cm.h>
#include "siw.h"

void qp_offsets(void);

void qp_offsets(void)
{
	/* rxe_modify_qp(struct ib_qp *, struct ib_qp_attr *, int mask, struct ib_udata *) */
	OFFSET(IBQP_QP_NUM, ib_qp, qp_num);
	OFFSET(QPATTR_MAX_RD_ATOMIC, ib_qp_attr, max_rd_atomic);
	OFFSET(QPATTR_MAX_DEST_RD_ATOMIC, ib_qp_attr, max_dest_rd_atomic);
	OFFSET(QPATTR_TIMEOUT, ib_qp_attr, timeout);
	OFFSET(QPATTR_RETRY_CNT, ib_qp_attr, retry_cnt);
	OFFSET(QPATTR_RNR_RETRY, ib_qp_attr, rnr_retry);
	DEFINE(IB_QP_MAX_QP_RD_ATOMIC, IB_QP_MAX_QP_RD_ATOMIC);
	DEFINE(IB_QP_MAX_DEST_RD_ATOMIC, IB_QP_MAX_DEST_RD_ATOMIC);

	/* ib_send_cm_req / ib_send_cm_rep(struct ib_cm_id *, struct ib_cm_{req,rep}_param *) */
	OFFSET(CMREQ_QP_NUM, ib_cm_req_param, qp_num);
	OFFSET(CMREQ_RESPONDER_RESOURCES, ib_cm_req_param, responder_resources);
	OFFSET(CMREQ_INITIATOR_DEPTH, ib_cm_req_param, initiator_depth);
	OFFSET(CMREQ_RETRY_COUNT, ib_cm_req_param, retry_count);
	OFFSET(CMREQ_RNR_RETRY_COUNT, ib_cm_req_param, rnr_retry_count);
	OFFSET(CMREP_QP_NUM, ib_cm_rep_param, qp_num);
	OFFSET(CMREP_RESPONDER_RESOURCES, ib_cm_rep_param, responder_resources);
	OFFSET(CMREP_INITIATOR_DEPTH, ib_cm_rep_param, initiator_depth);
	OFFSET(CMREP_RNR_RETRY_COUNT, ib_cm_rep_param, rnr_retry_count);

	/* siw_connect / siw_accept(struct iw_cm_id *, struct iw_cm_conn_param *) */
	OFFSET(IWPARAM_ORD, iw_cm_conn_param, ord);
	OFFSET(IWPARAM_IRD, iw_cm_conn_param, ird);
	OFFSET(IWPARAM_QPN, iw_cm_conn_param, qpn);

	/* siw_qp_modify(struct siw_qp *, struct siw_qp_attrs *, enum siw_qp_attr_mask) */
	OFFSET(SIWQP_QP_NUM, siw_qp, base_qp.qp_num);
	OFFSET(SIWATTR_ORQ_SIZE, siw_qp_attrs, orq_size);
	OFFSET(SIWATTR_IRQ_SIZE, siw_qp_attrs, irq_size);
	DEFINE(SIW_QP_ATTR_ORD, SIW_QP_ATTR_ORD);
}
